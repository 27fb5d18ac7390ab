"""Errors and exit codes: one failure path for the sweep and every `nnbench` command (both sides of the process
boundary may raise these; only the parent prints them).

Every error a user can fix is one line on stderr, `<prog>: error: <what went wrong>: <the fix>`, and a non-zero
exit code from this table.
"""
from __future__ import annotations

import re
import sys
from typing import NoReturn

OK = 0
LOST = 1  # something was lost or not logged, a self-check failed, or a regression was found
BAD_INPUT = 2  # input the user must fix, or a store that can't be opened; nothing was written
INTERRUPTED = 130  # 128 + SIGINT (143 for SIGTERM): interrupted; what was finished is kept


class BadInput(Exception):
    """Input the user must fix; shown as one line, nothing is written to the store."""


class Lost(Exception):
    """What was measured could not all be kept where asked (a store that went away): one line saying where it is,
    exit LOST."""


def first_line(e: BaseException) -> str:
    """The line of an error message that says what went wrong (for a database error: the driver's own words)."""
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    driver = [ln.split("Error) ", 1)[1] for ln in lines if re.match(r"\([\w.]+Error\) ", ln)]
    return (driver or lines or [type(e).__name__])[0][:300]


def error_line(message: str, prog: str = "nnbench") -> str:
    return f"{prog}: error: {message}"


def fail(message: str, code: int = BAD_INPUT, prog: str = "nnbench") -> NoReturn:
    """Stop with one line on stderr and `code`."""
    print(error_line(message, prog), file=sys.stderr)
    sys.exit(code)

"""`nnbench` in a process of its own as a terminal starts it, and signals into it as a terminal's Ctrl-C (or a kill)
reaches it; Python programs that make a signal land where Python drops what a handler raises."""
from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from typing import Callable

from tests.helpers import ROOT, user_env

PROGRESS = re.compile(r"round \d+/\d+ done, \d+ s")  # agree's progress, on stderr
# `nnbench ARGV[1:]`, sent SIGINT from inside a gc callback, at the first collection once the module ARGV[0] is
# imported: Python drops whatever the handler raises there, as in jax's gc callback.
IN_A_GC_CALLBACK = """
import gc, os, signal, sys
from experiments.cli import main

module, sys.argv[1:] = sys.argv[1], sys.argv[2:]
struck = []

def strike(phase, info):
    if not struck and module in sys.modules:
        struck.append(phase)
        os.kill(os.getpid(), signal.SIGINT)

gc.callbacks.append(strike)
sys.exit(main())
"""
# `nnbench ARGV` as `python -m experiments` runs it, sent SIGINT while its modules load, before the command's handler
# is installed: as the first of experiments.common is imported.
WHILE_LOADING = """
import os, runpy, signal, sys

class Strike:
    def find_spec(self, name, path=None, target=None):
        if name == "experiments.common":
            sys.meta_path.remove(self)
            os.kill(os.getpid(), signal.SIGINT)

sys.meta_path.insert(0, Strike())
runpy.run_module("experiments", run_name="__main__")
"""
# `nnbench ARGV`, sent SIGINT once it has ended: ARGV[0] "returned": as main() returns; "atexit": inside an atexit
# function (both run before the interpreter's teardown).
AFTER_THE_END = """
import atexit, os, signal, sys
from experiments.cli import main

when, sys.argv[1:] = sys.argv[1], sys.argv[2:]
code = main()
if when == "returned":
    os.kill(os.getpid(), signal.SIGINT)
else:
    atexit.register(os.kill, os.getpid(), signal.SIGINT)
sys.exit(code)
"""


def foreground() -> None:
    """A terminal's foreground process gets SIGINT's default: a test run in the background (`cmd &` in a script)
    would hand its children SIGINT ignored, and Python then leaves it ignored."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def interrupted(argv: list[str], after_s: float | None, signum: int = signal.SIGINT,
                program: str | None = None) -> tuple[int, list[str], str]:
    """`nnbench ARGV` in a process of its own (or `program`, Python source, with ARGV as its arguments), sent `signum`
    after `after_s` seconds (None: none sent): its exit code, its stderr's lines but agree's progress, its stdout."""
    command = [sys.executable, "-c", program] if program else [sys.executable, "-m", "experiments"]
    proc = subprocess.Popen([*command, *argv], cwd=ROOT, env=user_env(), stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=foreground)
    if after_s is not None:
        time.sleep(after_s)
        proc.send_signal(signum)
    out, err = proc.communicate(timeout=120)
    return proc.returncode, [ln for ln in err.splitlines() if ln.strip() and not PROGRESS.fullmatch(ln)], out



def during(argv: list[str], moment: Callable[[], bool], act: Callable[[subprocess.Popen], None],
           **extra_env: str) -> tuple[int, list[str], str]:
    """`nnbench ARGV` in a process of its own (`extra_env` added to its environment), `act` done to it once
    `moment()` holds (a file the command writes then; polled): its exit code, its stderr's lines, its stdout.
    AssertionError where the command ends before that moment."""
    proc = subprocess.Popen([sys.executable, "-m", "experiments", *argv], cwd=ROOT, env=user_env(**extra_env),
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=foreground)
    while not moment():
        if proc.poll() is not None:
            out, err = proc.communicate()
            raise AssertionError(f"nnbench {' '.join(argv)} ended ({proc.returncode}) before its moment: {err[-2000:]}")
        time.sleep(0.05)
    act(proc)
    out, err = proc.communicate(timeout=120)
    return proc.returncode, [ln for ln in err.splitlines() if ln.strip()], out

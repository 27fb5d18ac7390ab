"""The installers that build measuring environments (harness/envs.py): uv when installed, else pip; where they get
packages from (`Index`); the released versions of a package an index serves, and those in a range; and the line of an
installer's error output that says why it failed. Parent side."""
from __future__ import annotations

import itertools
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from packaging.version import InvalidVersion, Version

CAUSES = ("╰─▶", "cause:", "Caused by:")  # uv's explanation: in a terminal, and not


@dataclass(frozen=True)
class Index:
    """Where packages come from: --index-url, --extra-index-url and --find-links as given (pip reads its own
    configuration too; uv is given pip's as flags, since it reads none of it)."""

    index_url: str | None = None
    find_links: tuple[str, ...] = ()
    extra_index_urls: tuple[str, ...] = ()

    def pip_args(self) -> list[str]:
        return (["--index-url", self.index_url] if self.index_url else []) + [
            a for u in self.extra_index_urls for a in ("--extra-index-url", u)] + [
            a for d in self.find_links for a in ("--find-links", d)]

    def uv_args(self) -> list[str]:
        cfg = pip_config()
        index = self.index_url or cfg.get("index-url")
        args = ["--index-strategy", "unsafe-best-match"] + (["--index-url", index] if index else [])
        for key, flag in (("extra-index-url", "--extra-index-url"), ("find-links", "--find-links"),
                          ("constraint", "--constraint")):
            args += [a for value in cfg.get(key, "").split() for a in (flag, value)]
        return args + [a for u in self.extra_index_urls for a in ("--extra-index-url", u)] + [
            a for d in self.find_links for a in ("--find-links", d)]


def pip_config() -> dict[str, str]:
    """pip's settings (its files and PIP_* variables, the later winning as in pip): {'find-links': '/opt/wheels'}."""
    r = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True)
    found = (re.match(r"^[^.]*\.([a-z-]+)='(.*)'$", line.strip()) for line in r.stdout.splitlines())
    return {m[1]: m[2] for m in found if m}


def uv() -> str | None:
    """uv's path: on PATH, or beside this interpreter (a venv's bin/)."""
    beside = Path(sys.executable).with_name("uv")
    return shutil.which("uv") or (str(beside) if beside.exists() else None)


def installer(choice: str | None = None) -> str:
    """uv when installed, else pip (or the one chosen); ValueError naming the fix."""
    if choice == "uv" and not uv():
        raise ValueError("uv is not installed: pip install uv, or --installer pip")
    return choice or ("uv" if uv() else "pip")


def reason(output: str) -> str:
    """The line of an installer's error output that says why: uv's last explanation (its wrapped lines joined),
    else pip's first ERROR line, else the last line."""
    lines = [ln.strip() for ln in output.strip().splitlines()]
    marked = [i for i, ln in enumerate(lines) if any(c in ln for c in CAUSES)]
    if marked:
        i = marked[-1]
        first = next(lines[i].split(c, 1)[1] for c in CAUSES if c in lines[i])
        rest = itertools.takewhile(lambda ln: ln and not ln.startswith(("hint:", "help:", "error:")), lines[i + 1:])
        return " ".join([first.strip(), *rest])[:400]
    errors = [ln.removeprefix("ERROR: ") for ln in lines if ln.startswith("ERROR: ")]
    return (errors[0] if errors else next((ln for ln in reversed(lines) if ln), "no output")).removeprefix(
        "error: ")[:400]


def released(name: str, index: Index, pre: bool = False) -> list[str]:
    """Every version of `name` the index serves this interpreter (pip's view: its configuration applies, yanked files
    and Requires-Python misfits left out), oldest first; LookupError with pip's reason. Its text output, which every
    pip since 21.2 prints (`--json` is newer than the pip of a fresh venv)."""
    r = subprocess.run([sys.executable, "-m", "pip", "index", "versions", "--disable-pip-version-check",
                        *(["--pre"] if pre else []), *index.pip_args(), name], capture_output=True, text=True)
    listing = next((ln.split(":", 1)[1] for ln in r.stdout.splitlines() if ln.startswith("Available versions:")), None)
    if r.returncode or listing is None:
        raise LookupError(reason(r.stderr or r.stdout))
    return sorted((v.strip() for v in listing.split(",") if v.strip()), key=Version)


def in_range(versions: list[str], bounds: str, pre: bool = False) -> list[str]:
    """The versions in 'A..B' (both ends included; 'A..' and '..B' open), in order; pre-releases only with `pre`."""
    lo, sep, hi = bounds.partition("..")
    if not sep:
        raise ValueError(f"range {bounds!r} is not A..B: e.g. 0.10.0..0.10.2")
    try:
        lo_v, hi_v = (Version(b) if b else None for b in (lo, hi))
    except InvalidVersion:
        raise ValueError(f"range {bounds!r} is not A..B of versions: e.g. 0.10.0..0.10.2") from None
    if lo_v and hi_v and lo_v > hi_v:
        raise ValueError(f"range {bounds!r} runs backwards: use {hi}..{lo}")
    out = {Version(v) for v in versions}
    return [str(v) for v in sorted(out) if (pre or not (v.is_prerelease or v.is_devrelease))
            and not (lo_v and v < lo_v) and not (hi_v and v > hi_v)]

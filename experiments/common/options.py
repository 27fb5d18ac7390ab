"""The numeric options every command shares, read one way (argparse types): a bad value is argparse's one line,
`nnbench <command>: error: argument --x: <what>: <the fix>`, exit 2."""
from __future__ import annotations

import argparse
import math
import tempfile
from pathlib import Path


def _number(text: str, flag: str, example: str) -> float:
    try:
        x = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number: e.g. {flag} {example}") from None
    if not math.isfinite(x):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number: e.g. {flag} {example}")
    return x


def threshold(text: str) -> float:
    """A relative change: a fraction (0.05) or a percentage (5%); 5 would be 500%, and is refused."""
    percent = text.strip().endswith("%")
    x = _number(text.strip().removesuffix("%"), "--threshold", "0.05 or 5%")
    if percent:
        x /= 100
    elif x > 1:
        raise argparse.ArgumentTypeError(f"--threshold {text} would be {x:.0%}: use {x / 100:g} or {text}%")
    if not 0 <= x < 1:
        raise argparse.ArgumentTypeError(f"{text} is not a change between 0 and 100%: e.g. --threshold 0.05 or 5%")
    return x


def probability(flag: str, example: str = "0.05"):
    """A level in (0, 1): --alpha (one comparison's significance level), --fdr (Benjamini-Hochberg's rate)."""
    def parse(text: str) -> float:
        x = _number(text, flag, example)
        if not 0 < x < 1:
            raise argparse.ArgumentTypeError(f"{flag} {text} is not between 0 and 1: e.g. {flag} {example}")
        return x
    return parse


def positive(flag: str, example: str, kind=float, least: float = 0, strict: bool = True):
    """A number above `least` (or at least it, where not `strict`), of `kind` (int: whole numbers only)."""
    def parse(text: str) -> float:
        x = _number(text, flag, example)
        if kind is int and x != int(x):
            raise argparse.ArgumentTypeError(f"{flag} {text} is not a whole number: e.g. {flag} {example}")
        if x <= least if strict else x < least:
            bound = f"above {least:g}" if strict else f"at least {least:g}"
            raise argparse.ArgumentTypeError(f"{flag} {text} must be {bound}: e.g. {flag} {example}")
        return kind(x)
    return parse


def writable(flag: str, directory: bool):
    """A path to write later, checked now: a directory (`directory`), existing or to be made, or a file; the nearest
    existing folder must be one this process can write into, so a measurement never ends on a path it can't use."""
    def parse(text: str) -> Path:
        path = Path(text)
        if path.exists() and path.is_dir() != directory:
            what, fix = ("a file", "name a folder") if directory else ("a folder", "name a file")
            raise argparse.ArgumentTypeError(f"{flag} {text} is {what}: {fix}")
        base = path if directory else path.parent
        nearest = next(a for a in (base, *base.parents) if a.exists())
        try:  # a file made and dropped there: permission bits don't tell (root, read-only mounts, /proc)
            tempfile.TemporaryFile(dir=nearest).close()
        except OSError:
            raise argparse.ArgumentTypeError(f"{flag} {text}: {nearest} is not a folder this user can write into: "
                                             "give a path under one") from None
        return path
    return parse

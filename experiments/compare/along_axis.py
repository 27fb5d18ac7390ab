"""Values of one axis compared paired, the one flow `nnbench ab`, `versions` and each step of `bisect` share: the paired
sweep along the axis run as a child (`compare.paired.sweep`), its verdicts read back typed, then what the command
asked for beyond the table: a Markdown report appended to a file, upstream report drafts of the cells judged slower,
and the gate on a slower cell (exit 1, naming the cells)."""
from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from experiments.common.errors import LOST, OK
from experiments.compare import paired
from experiments.stats.verdicts import PAIRED_THRESHOLD


@dataclass(frozen=True)
class Along:
    """The paired sweep along one axis: its overrides (the axis's values, the points', `report.along` and the
    design's), its dir, the store, the parent run it goes under (None: its own), and `quiet`: its lines to stderr."""

    overrides: tuple[str, ...]
    out: Path
    uri: str
    experiment: str
    parent: str | None = None
    quiet: bool = False


@dataclass(frozen=True)
class Asked:
    """What the command asked for beyond the table: the line that asked (the reports' title), a Markdown file to
    append to, the threshold it names, a folder for upstream drafts, and whether a slower cell fails."""

    line: str
    markdown: Path | None = None
    threshold: float | None = None
    issue: Path | None = None
    fail_on_regression: bool = False


def compared(along: Along) -> tuple[int, list[paired.CellVerdict]]:
    """The sweep's exit code and its verdicts; no verdicts where a signal stopped it (`paired.STOPPED`: it said so in
    its one line and closed its runs)."""
    code = paired.sweep(list(along.overrides), along.out, along.uri, along.experiment, along.parent, quiet=along.quiet)
    if code in paired.STOPPED:
        return code, []
    return code, paired.verdicts(along.out)


def markdown(rows: list[paired.CellVerdict], asked: Asked, title: str | None = None) -> None:
    """The cells that changed appended to `asked.markdown` (a CI job summary collects several reports)."""
    if asked.markdown:
        threshold = asked.threshold if asked.threshold is not None else PAIRED_THRESHOLD
        with open(asked.markdown, "a") as f:
            f.write(paired.markdown(rows, title or asked.line, threshold))


def drafted(rows: list[paired.CellVerdict], out: Path, asked: Asked) -> None:
    """An upstream report draft and its standalone script for each cell judged slower, where `asked.issue` says."""
    if asked.issue:
        from experiments.compare import upstream  # the exports and the script: only when asked

        upstream.written(upstream.drafts(rows, out, asked.issue, asked.line), asked.issue)


def gate(code: int, rows: list[paired.CellVerdict], asked: Asked, command: str) -> int:
    """The command's exit code: the sweep's where it failed, else 1 (the slower cells named) where a slower cell
    fails it, else 0."""
    if code != OK:
        return code
    if asked.fail_on_regression and (slow := paired.slower(rows)):
        print(f"nnbench {command}: error: slower: {'; '.join(slow)}", file=sys.stderr)
        return LOST
    return OK

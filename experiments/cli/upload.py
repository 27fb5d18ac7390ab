"""Log results kept on disk, and repair what a failing store left: `nnbench upload DIR [--uri URI]`.

Every point is saved in its Hydra job directory before it is logged. For each point under DIR (a sweep, job or
point dir, or any folder above them) the store is made to hold its run exactly once: a complete run is left alone,
a half-logged one is completed, a missing one is logged. Then each sweep's parent run is closed: FINISHED (with
the report) once every planned point is in the store, KILLED for an interrupted sweep, else FAILED. Points go to
their sweep's own store unless --uri says otherwise; where that store has lost the sweep's parent run (deleted or
replaced while the sweep ran), its points go under a new one. A sweep that is still running is skipped (exit 1).
"""
from __future__ import annotations

import argparse
from pathlib import Path

from experiments.cli.selection import add_uri
from experiments.common.errors import BadInput
from experiments.store.uris import validate


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("directory", type=Path, help="a sweep or job directory (or any folder above them)")
    add_uri(p, "tracking URI (default: the sweep's own store)")
    p.add_argument("--experiment", help="experiment name (default: the points' own)")


def run(a: argparse.Namespace) -> int:
    if not a.directory.is_dir():
        raise BadInput(f"no directory {a.directory}: give a sweep's or job's directory (e.g. multirun/2026-01-02/"
                       "03-04-05), or a folder above them")
    if a.uri:
        validate(a.uri, a.experiment or "nnbench", "--uri")
    from experiments.sweep import saved_points  # mlflow is slow to import: only after parsing

    return saved_points.upload(a.directory, a.uri, a.experiment)

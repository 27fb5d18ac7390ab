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
import sys
from collections import defaultdict
from pathlib import Path

from experiments.cli.selection import add_uri
from experiments.common.errors import BAD_INPUT, LOST, OK, BadInput, error_line, first_line
from experiments.store.records import META, Record
from experiments.store.sweepdir import STATE, Sweep, SweepState
from experiments.store.uris import store_uri, validate


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
    from experiments.store import repair, tracking  # mlflow is slow to import: only after parsing
    from experiments.sweep import ending

    code, done = OK, 0
    for sweep_dir, dirs in saved_points(a.directory).items():
        sweep = Sweep(sweep_dir) if sweep_dir else None
        if sweep and sweep.running():
            print(f"{sweep_dir}: still running (its {STATE} lock is held); upload it once it ends")
            code = LOST
            continue
        state = sweep.read() if sweep else None
        uri = a.uri or (state.uri if state else store_uri(None))
        own = state is not None and state.uri == uri
        try:
            cfg = Record.load(dirs[0]).config  # as logged: common.config.logged
            store = tracking.Store(uri)
            exp_id = store.open(a.experiment or cfg["mlflow"]["experiment_name"],
                                "--uri" if a.uri else "mlflow.tracking_uri")
            if own and state.parent_run_id:
                state = parent_in(store, exp_id, sweep, state)
            for d in dirs:
                if what := repair.sync_point(store, exp_id, d, state.parent_run_id if own else None, own):
                    print(f"{d}: {what}")
                    done += 1
            if own and state.parent_run_id:
                print(f"{sweep_dir}: {ending.close_sweep(sweep, cfg['report']['baseline'])}")
        except Exception as e:  # one sweep's store failing must not stop the others
            print(error_line(f"{sweep_dir or a.directory}: {first_line(e)}", "nnbench upload"), file=sys.stderr)
            code = BAD_INPUT
    if done == 0 and code == OK:
        print(f"nothing to log under {a.directory}: every point is in its store")
    return code


def parent_in(store, experiment_id: str, sweep: Sweep, state: SweepState) -> SweepState:
    """The sweep's state, with a new parent run where its store (a `tracking.Store`) has lost its own (deleted or
    replaced while the sweep ran): its points then go under the new one."""
    from experiments.sweep import opening  # the sweep's door: only where a parent is started again

    if store.get_runs([state.parent_run_id])[state.parent_run_id] is not None:
        return state
    new = opening.restart_parent(store, experiment_id, sweep)
    print(f"{sweep.directory}: {state.uri} has no parent run {state.parent_run_id}: its points go under a new one, "
          f"{new.parent_run_id}")
    return new


def saved_points(directory: Path) -> dict[Path | None, list[Path]]:
    """The point dirs saved under `directory`, by the sweep dir above them (None: in no sweep); BadInput for none."""
    groups: dict[Path | None, list[Path]] = defaultdict(list)
    for meta in sorted(directory.glob(f"**/points/*/{META}")):
        sweep = Sweep.above(meta.parent)
        groups[sweep.directory if sweep else None].append(meta.parent)
    if not groups:
        raise BadInput(f"no point saved under {directory} (no points/*/{META}): give a sweep's or job's directory, "
                       "or a folder above them")
    return groups

"""The points a sweep saved on disk put into their store exactly once (`nnbench upload`): a complete run left alone,
a half-logged one completed, a missing one logged; then each sweep's parent run closed (`sweep.ending`), under a new
parent where the store lost the sweep's own. Parent side."""
from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path

from experiments.common.errors import BAD_INPUT, LOST, OK, BadInput, error_line, first_line
from experiments.store.records import META, Record
from experiments.store.sweepdir import POINTS, STATE, Sweep, SweepState, saved
from experiments.store.uris import store_uri


def upload(directory: Path, uri: str | None = None, experiment: str | None = None) -> int:
    """Every point saved under `directory` into its sweep's store (`uri`: another one; `experiment`: another
    experiment), each sweep's parent run closed; the exit code: 1 where a sweep still runs, 2 where a store fails
    (the other sweeps go on)."""
    code, done = OK, 0
    for sweep_dir, dirs in found(directory).items():
        sweep = Sweep(sweep_dir) if sweep_dir else None
        if sweep and sweep.running():
            print(f"{sweep_dir}: still running (its {STATE} lock is held); upload it once it ends")
            code = LOST
            continue
        try:
            done += synced(sweep, dirs, uri, experiment)
        except Exception as e:  # one sweep's store failing must not stop the others
            print(error_line(f"{sweep_dir or directory}: {first_line(e)}", "nnbench upload"), file=sys.stderr)
            code = BAD_INPUT
    if done == 0 and code == OK:
        print(f"nothing to log under {directory}: every point is in its store")
    return code


def synced(sweep: Sweep | None, dirs: list[Path], uri: str | None, experiment: str | None) -> int:
    """One sweep's points (`dirs`; `sweep` None: points in no sweep) made to hold in the store once each, its parent
    closed; how many points were logged or completed."""
    from experiments.store import repair, tracking  # mlflow is slow to import: only once points are found
    from experiments.sweep import ending

    state = sweep.read() if sweep else None
    target = uri or (state.uri if state else store_uri(None))
    own = state is not None and state.uri == target
    cfg = Record.load(dirs[0]).config  # as logged: common.config.logged
    store = tracking.Store(target)
    exp_id = store.open(experiment or cfg["mlflow"]["experiment_name"], "--uri" if uri else "mlflow.tracking_uri")
    if own and state.parent_run_id:
        state = parent_in(store, exp_id, sweep, state)
    done = 0
    for d in dirs:
        if what := repair.sync_point(store, exp_id, d, state.parent_run_id if own else None, own):
            print(f"{d}: {what}")
            done += 1
    if own and state.parent_run_id:
        print(f"{sweep.directory}: {ending.close_sweep(sweep, cfg['report']['baseline'])}")
    return done


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


def found(directory: Path) -> dict[Path | None, list[Path]]:
    """The point dirs saved under `directory`, by the sweep dir above them (None: in no sweep); BadInput for none."""
    groups: dict[Path | None, list[Path]] = defaultdict(list)
    for point in saved(directory):
        sweep = Sweep.above(point)
        groups[sweep.directory if sweep else None].append(point)
    if not groups:
        raise BadInput(f"no point saved under {directory} (no {POINTS}/*/{META}): give a sweep's or job's directory, "
                       "or a folder above them")
    return groups

"""Repair what a failing store left: make the store hold each point kept on disk exactly once, and close the runs
that dead sweeps left RUNNING (`nnbench upload` runs this over a folder; each new sweep closes the stale runs).

Every point is saved in its Hydra job directory before it is logged, and its run's id goes to the point's
`mlflow_run_id` marker as soon as the run exists. For each point `sync_point`:
- leaves a complete run alone (so running it twice logs nothing twice);
- completes a run a store failure caught half-logged (RUNNING, or closed and tagged `nnbench.incomplete`);
- logs a point that has no run yet (after adopting a run the store made for it before the marker was written).
Parent side.
"""
from __future__ import annotations

import logging
from collections import defaultdict
from pathlib import Path

from experiments.store.parent import Parent, ending
from experiments.store.tracking import POINT_DIR, SWEEP, Store, is_complete
from experiments.store.records import Record
from experiments.store.sweepdir import MARKER, Sweep

log = logging.getLogger("nnbench")


def sync_point(store: Store, experiment_id: str, directory: Path, parent: str | None, own_store: bool) -> str:
    """Make the store hold this point's run exactly once; what was done, in a few words."""
    rec, marker = Record.load(directory), directory / MARKER
    run_id = marker.read_text().strip() if marker.exists() else None
    if run_id is None and "'" not in str(directory.resolve()):  # a run made before its marker: take it over
        found = store.find_runs(experiment_id, f"tags.`{POINT_DIR}` = '{directory.resolve()}'")
        for extra in found[1:]:
            store.discard(extra.info.run_id)
        if found:
            run_id = found[0].info.run_id
            marker.write_text(run_id)
    if run_id is not None:
        run = store.get_runs([run_id])[run_id]
        if is_complete(run):
            return ""
        if run is not None and run.info.lifecycle_stage == "active":
            store.fill(run_id, rec, directory, parent, have=run.data)
            return f"completed run {run_id}"
        if not own_store:
            return ""  # logged to its sweep's store; this is another one
    run_id = store.log_record(experiment_id, rec, directory, parent, on_created=marker.write_text)
    return f"logged as run {run_id}"


def close_stale(store: Store, experiment_id: str) -> None:
    """Close the runs that earlier sweeps left RUNNING in this store (a store failure, a crash), where their
    sweep dir is visible here and no live process holds its lock: a parent KILLED if its sweep was interrupted,
    else FAILED; a point's run FAILED and tagged incomplete, for upload to complete."""
    closed: dict[Path, int] = defaultdict(int)
    for run in store.find_runs(experiment_id, "attributes.status = 'RUNNING'"):
        tags, run_id = run.data.tags, run.info.run_id
        if tags.get(SWEEP) == "true":
            sweep = Sweep(Path(run.data.params.get("sweep_dir", "/nonexistent")))
            if not sweep.state.exists() or sweep.running() or sweep.read().parent_run_id != run_id:
                continue
            Parent(store, run_id).close(ending(sweep.read().ended == "interrupted", failed=True), quiet=False)
        elif POINT_DIR in tags:
            sweep = Sweep.above(Path(tags[POINT_DIR]))
            if sweep is None or sweep.running():
                continue
            store.set_status(run_id, "FAILED", f"left RUNNING by a store failure; nnbench upload {sweep.directory} "
                             "completes it")
        else:
            continue
        closed[sweep.directory] += 1
    for directory, n in closed.items():
        log.warning("closed %d run(s) that a failed store left RUNNING in %s; `nnbench upload %s` "
                    "logs and completes its kept points", n, directory, directory)

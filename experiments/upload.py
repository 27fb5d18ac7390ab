"""Log results kept on disk, and repair what a failing store left: `python -m experiments.upload DIR [--uri URI]`.

Every point is saved in its Hydra job directory before it is logged, and its run's id goes to the point's
`mlflow_run_id` marker as soon as the run exists. For each point under DIR this:
- leaves a complete run alone (so running it twice logs nothing twice);
- completes a run a store failure caught half-logged (RUNNING, or closed and tagged `nnbench.incomplete`);
- logs a point that has no run yet (after adopting a run the store made for it before the marker was written);
then closes each sweep's parent run: FINISHED (with the report) once every planned point is in the store, KILLED
for an interrupted sweep, else FAILED. Points go to their sweep's own store unless --uri says otherwise. A sweep
that is still running is skipped.
"""
from __future__ import annotations

import argparse
import logging
import sys
from collections import defaultdict
from pathlib import Path

from experiments.sweep import MARKER, STATE, Sweep

log = logging.getLogger("nnbench")


def sync_point(uri: str, experiment_id: str, directory: Path, parent: str | None, own_store: bool) -> str:
    """Make the store hold this point's run exactly once; what was done, in a few words."""
    from experiments import tracking
    from experiments.records import Record

    rec, marker = Record.load(directory), directory / MARKER
    run_id = marker.read_text().strip() if marker.exists() else None
    if run_id is None and "'" not in str(directory.resolve()):  # a run made before its marker: take it over
        found = tracking.find_runs(uri, experiment_id, f"tags.`{tracking.POINT_DIR}` = '{directory.resolve()}'")
        for extra in found[1:]:
            tracking.discard(uri, extra.info.run_id)
        if found:
            run_id = found[0].info.run_id
            marker.write_text(run_id)
    if run_id is not None:
        run = tracking.get_runs(uri, [run_id])[run_id]
        if tracking.is_complete(run):
            return ""
        if run is not None and run.info.lifecycle_stage == "active":
            tracking.fill(uri, run_id, rec, directory, parent, have=run.data)
            return f"completed run {run_id}"
        if not own_store:
            return ""  # logged to its sweep's store; this is another one
    run_id = tracking.log_record(uri, experiment_id, rec, directory, parent, on_created=marker.write_text)
    return f"logged as run {run_id}"


def close_sweep(sweep: Sweep, baseline: str) -> str:
    """Close the sweep's parent run by the rule in the module docstring; what was done."""
    from experiments import ending, tracking

    state = sweep.read()
    parent = tracking.get_runs(state.uri, [state.parent_run_id])[state.parent_run_id]
    if parent is None:
        return f"its parent run {state.parent_run_id} is not in {state.uri}"
    o = ending.outcome(sweep, state)
    status = "KILLED" if state.ended == "interrupted" else "FINISHED" if o.complete else "FAILED"
    if parent.info.status != status or not tracking.is_complete(parent):
        ending.close_parent(state, status, baseline)
    missing = f" (planned points without a record: see the job logs in {sweep.directory})" if (
        o.missing and status == "FAILED") else ""
    return f"parent run {state.parent_run_id} {status}: {o.line()}{missing}"


def close_stale(uri: str, experiment_id: str) -> None:
    """Close the runs that earlier sweeps left RUNNING in this store (a store failure, a crash), where their
    sweep dir is visible here and no live process holds its lock: a parent KILLED if its sweep was interrupted,
    else FAILED; a point's run FAILED and tagged incomplete, for upload to complete."""
    from experiments import tracking

    closed: dict[Path, int] = defaultdict(int)
    for run in tracking.find_runs(uri, experiment_id, "attributes.status = 'RUNNING'"):
        tags, run_id = run.data.tags, run.info.run_id
        if tags.get("nnbench.sweep") == "true":
            sweep = Sweep(Path(run.data.params.get("sweep_dir", "/nonexistent")))
            if not sweep.state.exists() or sweep.running() or sweep.read().parent_run_id != run_id:
                continue
            tracking.set_status(uri, run_id, "KILLED" if sweep.read().ended == "interrupted" else "FAILED")
        elif tracking.POINT_DIR in tags:
            sweep = Sweep.above(Path(tags[tracking.POINT_DIR]))
            if sweep is None or sweep.running():
                continue
            tracking.set_status(uri, run_id, "FAILED", f"left RUNNING by a store failure: python -m "
                                f"experiments.upload {sweep.directory} completes it")
        else:
            continue
        closed[sweep.directory] += 1
    for directory, n in closed.items():
        log.warning("closed %d run(s) that a failed store left RUNNING in %s; `python -m experiments.upload %s` "
                    "logs and completes its kept points", n, directory, directory)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m experiments.upload", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("directory", type=Path, help="a sweep or job directory (or any folder above them)")
    p.add_argument("--uri", help="tracking URI (default: the sweep's own store)")
    p.add_argument("--experiment", help="experiment name (default: the points' own)")
    a = p.parse_args(argv)

    from experiments import ending, tracking
    from experiments.config import DEFAULT_BASELINE
    from experiments.records import META, Record

    groups: dict[Path | None, list[Path]] = defaultdict(list)
    for meta in sorted(a.directory.glob(f"**/points/*/{META}")):
        sweep = Sweep.above(meta.parent)
        groups[sweep.directory if sweep else None].append(meta.parent)
    if not groups:
        print(f"nothing to log under {a.directory}")
        return 0
    code, done = 0, 0
    for sweep_dir, dirs in groups.items():
        sweep = Sweep(sweep_dir) if sweep_dir else None
        if sweep and sweep.running():
            print(f"{sweep_dir}: still running (its {STATE} lock is held); upload it once it ends")
            code = 1
            continue
        state = sweep.read() if sweep else None
        uri = a.uri or (state.uri if state else tracking.store_uri(None))
        own = state is not None and state.uri == uri
        cfg = Record.load(dirs[0]).config
        name = a.experiment or cfg.get("mlflow", {}).get("experiment_name", "nnbench")
        try:
            exp_id = tracking.open_store(uri, name)
            for d in dirs:
                if what := sync_point(uri, exp_id, d, state.parent_run_id if own else None, own):
                    print(f"{d}: {what}")
                    done += 1
            if own and state.parent_run_id:
                print(f"{sweep_dir}: {close_sweep(sweep, cfg.get('report', {}).get('baseline', DEFAULT_BASELINE))}")
        except Exception as e:
            print(f"nnbench upload: error: {sweep_dir or a.directory}: {ending.first_line(e)}", file=sys.stderr)
            code = 2
    if done == 0 and code == 0:
        print(f"nothing to log under {a.directory}: every point is in its store")
    return code


if __name__ == "__main__":
    sys.exit(main())

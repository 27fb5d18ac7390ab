"""A sweep's start: the store opened once, runs that earlier sweeps left RUNNING closed, resume's lookup, the parent
run, and the state file every job reads. Parent side (the process that launches the sweep).
"""
from __future__ import annotations

import logging
import time
from dataclasses import replace
from pathlib import Path

from experiments.common.config import logged
from experiments.common.job import Job
from experiments.measure.machine import check
from experiments.store import records
from experiments.store.sweepdir import Sweep, SweepState, without
from experiments.sweep import cells, interrupts

log = logging.getLogger("nnbench")

ACTIVE: Sweep | None = None  # the sweep this process opened (what an interrupt closes)


def already_done(store, experiment_id: str, job: Job) -> list[int]:
    """With resume=true, the batch sizes of the job's points that the store (a `tracking.Store`) holds FINISHED
    already."""
    if not job.config.resume:
        return []
    keys = {records.point_key(job, p): p.batch_size for p in job.points}
    return sorted(keys[k] for k in store.finished_points(experiment_id, set(keys), job.fingerprint))


def open_sweep(directory: Path, jobs: list[Job] | None, uri: str, experiment: str, parent: str | None = None,
               params: dict[str, str] | None = None, nest_under: str | None = None,
               overrides: list[str] | None = None) -> SweepState:
    """Open the store (created once, before any job logs), start the sweep's parent run, write the state.

    `parent`: the parent run's name (with its `params`; nested under the run `nest_under` where given), or None
    for a single run; `overrides`: the command line's (each paired verdict's repro starts from them). Raises
    StoreUnavailable or SweepTaken. Runs that earlier sweeps left RUNNING in this store are closed first (see store.repair.close_stale).
    """
    from experiments.store import repair, tracking  # mlflow is slow to import: only once the input is good

    global ACTIVE
    seconds = max((j.config.bench.machine_check_s for j in jobs), default=0) if jobs else 1.0
    machine = check(seconds) if seconds > 0 else None  # before any worker: nothing of ours runs meanwhile
    if machine is not None:
        log.info("%s", machine.line())
    with interrupts.deferred():  # a signal here must not leave a parent run without a state file
        store = tracking.Store(uri)
        exp_id = store.open(experiment)
        repair.close_stale(store, exp_id)
        resumed = {str(i): done for i, j in enumerate(jobs or []) if (done := already_done(store, exp_id, j))}
        if resumed:
            skipped = sum(map(len, resumed.values()))
            log.info("resume: %d of %d points already have a FINISHED run of the same config and environment in "
                     "%s; they are skipped", skipped, sum(len(j.points) for j in jobs), uri)
            jobs = [without(j, resumed.get(str(i), [])) for i, j in enumerate(jobs)]
        n_jobs, points = (len(jobs), sum(len(j.points) for j in jobs)) if jobs is not None else (None, None)
        measurements = sum(cells.measurements(j) for j in jobs) if jobs is not None else None
        sweep = Sweep(directory)
        state = SweepState(uri, exp_id, None, n_jobs, points, time.time(), measurements, resumed=resumed,
                           machine=machine, groups=cells.plan(jobs) if jobs else [],
                           configs=[logged(j.config) for j in jobs or []],
                           fingerprints=[j.fingerprint for j in jobs or []], overrides=list(overrides or []))
        sweep.start(state)
        ACTIVE = sweep
        if parent is not None:
            run_id = store.start_parent(exp_id, parent, {**(params or {}), "job_count": n_jobs,
                                                         "point_count": points}, nest_under)
            state = replace(state, parent_run_id=run_id)
            sweep.write(state)
    return state

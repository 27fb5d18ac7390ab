"""A sweep's start: the store opened once, runs that earlier sweeps left RUNNING closed, resume's lookup, the parent
run, and the state file every job reads. Parent side (the process that launches the sweep).
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from experiments.common.config import logged
from experiments.common.job import Job
from experiments.measure.machine import check
from experiments.store import records
from experiments.store.sweepdir import Sweep, SweepState, without
from experiments.sweep import paired_engine, stopping

log = logging.getLogger("nnbench")

ACTIVE: Sweep | None = None  # the sweep this process opened (what an interrupt closes)


@dataclass(frozen=True)
class ParentRun:
    """A sweep's parent run, to start: its name and params, and the run it nests under (a sweep that `versions` or
    `bisect` started)."""

    name: str
    params: dict[str, str] = field(default_factory=dict)
    nest_under: str | None = None

    @classmethod
    def of(cls, overrides: list[str], sweep_dir: Path, started: float, nest_under: str | None = None) -> ParentRun:
        """A sweep's, named by when it started and its command line's overrides."""
        line = " ".join(overrides)
        return cls(f"sweep {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(started))} · {line}",
                   {"overrides": line, "sweep_dir": str(sweep_dir)}, nest_under)

    def start(self, store, experiment_id: str, jobs: int | None, points: int | None) -> str:
        """Start it in the store (a `tracking.Store`) with the sweep's numbers of jobs and points; its id."""
        from experiments.store.parent import Parent  # mlflow is slow to import: only once a parent is started

        params = {**self.params, "job_count": jobs, "point_count": points}
        return Parent.start(store, experiment_id, self.name, params, kind="sweep", nest_under=self.nest_under).run_id


def already_done(store, experiment_id: str, job: Job) -> list[int]:
    """With resume=true, the batch sizes of the job's points that the store (a `tracking.Store`) holds FINISHED
    already."""
    if not job.config.resume:
        return []
    keys = {records.point_key(job, p): p.batch_size for p in job.points}
    return sorted(keys[k] for k in store.finished_points(experiment_id, set(keys), job.fingerprint))


def skip_resumed(store, experiment_id: str, jobs: list[Job] | None) -> tuple[dict[str, list[int]], list[Job] | None]:
    """With resume=true, per job (by number) the batch sizes the store (a `tracking.Store`) holds FINISHED already,
    and the jobs without those points."""
    resumed = {str(i): done for i, j in enumerate(jobs or []) if (done := already_done(store, experiment_id, j))}
    if resumed:
        skipped = sum(map(len, resumed.values()))
        log.info("resume: %d of %d points already have a FINISHED run of the same config and environment in "
                 "%s; they are skipped", skipped, sum(len(j.points) for j in jobs), store.uri)
        jobs = [without(j, resumed.get(str(i), [])) for i, j in enumerate(jobs)]
    return resumed, jobs


def open_sweep(directory: Path, jobs: list[Job] | None, uri: str, experiment: str, parent: ParentRun | None = None,
               overrides: list[str] | None = None) -> SweepState:
    """Open the store (created once, before any job logs), start the sweep's parent run, write the state.

    `parent`: the parent run to start, or None for a single run; `overrides`: the command line's (each paired
    verdict's repro starts from them). Raises StoreUnavailable or SweepTaken. Runs that earlier sweeps left RUNNING
    in this store are closed first (see store.repair.close_stale).
    """
    from experiments.store import repair, tracking  # mlflow is slow to import: only once the input is good

    global ACTIVE
    seconds = max((j.config.bench.machine_check_s for j in jobs), default=0) if jobs else 1.0
    machine = check(seconds) if seconds > 0 else None  # before any worker: nothing of ours runs meanwhile
    if machine is not None:
        log.info("%s", machine.line())
    with stopping.deferred():  # a signal here must not leave a parent run without a state file
        store = tracking.Store(uri)
        exp_id = store.open(experiment)
        repair.close_stale(store, exp_id)
        resumed, jobs = skip_resumed(store, exp_id, jobs)
        n_jobs, points = (len(jobs), sum(len(j.points) for j in jobs)) if jobs is not None else (None, None)
        measurements = sum(paired_engine.measurements(j) for j in jobs) if jobs is not None else None
        sweep = Sweep(directory)
        state = SweepState(uri, exp_id, None, n_jobs, points, time.time(), measurements, resumed=resumed,
                           machine=machine, groups=paired_engine.plan(jobs) if jobs else [],
                           configs=[logged(j.config) for j in jobs or []],
                           fingerprints=[j.fingerprint for j in jobs or []],
                           devices=[j.device for j in jobs or []], overrides=list(overrides or []))
        sweep.start(state)
        ACTIVE = sweep
        if parent is not None:
            state = replace(state, parent_run_id=parent.start(store, exp_id, n_jobs, points))
            sweep.write(state)
    return state


def restart_parent(store, experiment_id: str, sweep: Sweep) -> SweepState:
    """A new parent run for a sweep whose store lost its own (the store deleted or replaced while it ran), named as
    its launcher named the first, its id written in the sweep's state: `nnbench upload` logs the points under it."""
    state = sweep.read()
    run_id = ParentRun.of(state.overrides, sweep.directory, state.start).start(store, experiment_id, state.jobs,
                                                                                state.points)
    state = replace(state, experiment_id=experiment_id, parent_run_id=run_id)
    sweep.write(state)
    return state

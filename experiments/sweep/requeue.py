"""A SLURM job that runs again, requeued by SLURM (`scontrol requeue`, a preemption, a lost node) or by submitit
before its time limit: each run measures only the points its job dir holds no record of, and first logs what an
earlier run saved but could not log. Launcher's side: the process SLURM runs for one Hydra job.

SLURM sends SIGTERM both when it cancels a job and when it requeues one. The job's restart count tells them apart:
SLURM raises it before the signal comes (Slurm 22.05: `scontrol show job` reads `Restarts=1` during the first
requeue, `Restarts=0` during a `scancel`), while this run's `SLURM_RESTART_COUNT` still holds the old count.
Before a time limit (`signal_delay_s` ahead) and at a preemption where the cluster sets
`SlurmctldParameters=preempt_send_user_signal`, submitit's own signal comes instead (USR2): its handler checkpoints
the job (hydra-submitit-launcher's `checkpoint` resubmits the same job) and requeues it while `max_num_timeout`
allows. nnbench takes that signal over, stops the worker, logs what it finished, and only then calls submitit's
handler: called where the signal lands, it would exit from the middle of a measurement or a record being logged.
"""
from __future__ import annotations

import functools
import json
import logging
import os
import re
import signal
import subprocess
from pathlib import Path
from typing import Callable

from experiments.common.errors import first_line
from experiments.common.job import Job
from experiments.store import records
from experiments.store.records import META
from experiments.store.sweepdir import POINTS, SweepState, without
from experiments.sweep import stopping

log = logging.getLogger("nnbench")
_submitit: tuple[int, Callable] | None = None  # submitit's signal in this job, and its handler


def signals() -> tuple[int, ...]:
    """The signal submitit handles in a SLURM job (USR2 unless SUBMITIT_PREEMPT_SIGNAL names another), for
    `stopping` to take over; its handler is kept for `leave`. None outside a submitit SLURM job."""
    global _submitit
    if os.environ.get("SUBMITIT_EXECUTOR") != "slurm":
        return ()
    if _submitit is None:
        import submitit  # only in a submitit job, where it is installed

        signum = signal.Signals[f"SIG{submitit.JobEnvironment.USR_SIG}"]
        handler = signal.getsignal(signum)
        if not callable(handler):  # not submitit's: leave the signal alone
            return ()
        _submitit = (signum, handler)
    return (_submitit[0],)


@functools.cache
def requeued() -> bool:
    """Whether SLURM is requeuing this job now: its restart count has grown past this run's."""
    job = os.environ.get("SLURM_JOB_ID")
    if not job:
        return False
    try:
        shown = subprocess.run(["scontrol", "show", "job", "-o", job], capture_output=True, text=True,
                               timeout=20).stdout
    except (OSError, subprocess.SubprocessError):  # no answer: taken as a cancel, the sweep ends KILLED
        return False
    count = re.search(r"\bRestarts=(\d+)", shown)
    return count is not None and int(count[1]) > int(os.environ.get("SLURM_RESTART_COUNT") or 0)


def runs_again(signum: int | None) -> bool:
    """Whether the job will run again after this signal: submitit's (it requeues while it may) or SLURM's SIGTERM
    of a requeue. Its point in progress is then left to the next run, not recorded as interrupted."""
    if _submitit is not None and signum == _submitit[0]:
        return True
    return signum == signal.SIGTERM and requeued()


def leave(signum: int, job_dir: Path) -> str:
    """Hand the job back to SLURM: exit without a result, so the sweep waits for the job's next run. Returns why
    it can't where submitit does not requeue (too many time limits, `max_num_timeout`)."""
    stopping.ignore()  # the SIGTERM that SLURM sends every process of a job it requeues
    if _submitit is not None and signum == _submitit[0]:
        log.warning("job %s: SLURM signalled its time limit (or a preemption): its worker is stopped, and submitit "
                    "requeues the job if it may", job_dir)
        try:
            _submitit[1](signum, None)  # requeues, then exits (SystemExit)
        except Exception as e:  # submitit.core.utils.UncompletedJobError: not requeued
            return first_line(e)
        return "submitit did not requeue it"
    log.warning("job %s: requeued by SLURM; its next run measures the points it has not finished", job_dir)
    raise SystemExit(0)


def saved(job: Job, job_dir: Path) -> list[int]:
    """The batch sizes of the job's points that an earlier run saved in its dir."""
    keys = {json.loads(p.read_text())["tags"].get("point_key") for p in job_dir.glob(f"{POINTS}/*/{META}")}
    return [p.batch_size for p in job.points if records.point_key(job, p) in keys]


def again(job: Job, state: SweepState, job_dir: Path) -> Job:
    """The job without the points an earlier run of it saved (SLURM runs a requeued job from its start), after
    those points are in the store: a run that ended before logging them left them on disk only."""
    done = saved(job, job_dir)
    if not done:
        return job
    from experiments.store import repair  # mlflow is slow to import: only in a job that runs again

    try:
        for d in sorted(p.parent for p in job_dir.glob(f"{POINTS}/*/{META}")):
            repair.sync_point(state.uri, state.experiment_id, d, state.parent_run_id, own_store=True)
    except Exception as e:  # they stay on disk; the sweep's end counts them as not logged, and names upload
        log.error("job %s: could not log the points an earlier run saved (%s)", job_dir, first_line(e))
    log.info("job %s runs again: %d of its points were measured before, %d left", job_dir, len(done),
             len(job.points) - len(done))
    return without(job, done)


"""One Hydra job end to end: its validated job, its store (the sweep's, or opened here for a single run), its points
(`sweep.points`: measured, saved, profiled, logged), interrupts, and for a single run the last line and the exit
code. Parent side: this runs in the process that runs the sweep, or in a launcher's process (joblib, submitit, SLURM).

A job never raises an Exception: Hydra's basic launcher would record it as a failed job, launch the next, and
then skip the end of the sweep (`on_multirun_end` is never called). Its faults become failed points or a logged
line, and the end of the sweep counts what is missing. Only `stopping.Stop` (a BaseException) ends the sweep from here.
"""
from __future__ import annotations

import dataclasses
import errno
import logging
import os
import time
import traceback
from pathlib import Path

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

from experiments.common.config import logged
from experiments.common.errors import BadInput, fail, first_line
from experiments.common.job import Job
from experiments.common.protocol import PointResult
from experiments.measure.reading import read
from experiments.store import records, sweepdir, uris
from experiments.store.sweepdir import Sweep, SweepState, SweepTaken
from experiments.sweep import (commandline, ending, opening, paired_engine, preflight, proof, requeue, stopping,
                               unpaired_engine)
from experiments.sweep.points import TIMES, JobTimes, Points, log_point

log = logging.getLogger("nnbench")
FATAL = (errno.ENOSPC, errno.EDQUOT, errno.EROFS)  # no later point could be saved either: stop the sweep


def run(cfg: DictConfig) -> None:
    start, hc = time.perf_counter(), HydraConfig.get()
    stopping.install(*requeue.signals())  # again in a launcher's process, where the entry point's handlers are not
    logging.raiseExceptions = False  # a full disk: no traceback per log line from Hydra's log file handler
    out, multirun = Path(hc.runtime.output_dir), hc.mode == RunMode.MULTIRUN
    in_launcher = multirun and opening.ACTIVE is None  # a launcher's process (joblib, submitit, SLURM)
    if in_launcher:
        stopping.defer()  # a signal while the job starts waits for its first checkpoint, below
    sweep = Sweep(Path(hc.sweep.dir).resolve() if multirun else out)
    number = hc.job.num if multirun else 0
    try:
        this, state = prepare(cfg, multirun, sweep, out)
        if state.group(number)[0] != number:  # a cell's variants are measured by the first job of the cell
            log.info("job %d: its points are measured with job %d's, paired (the variants of a cell take turns on "
                     "one machine); they are in that job's dir", number, state.group(number)[0])
            return
        group = members(this, number, state, sweep.directory, out, multirun)
    except Exception as e:  # bad input, a taken sweep dir, a store or a state file that can't be read
        why = str(e) if isinstance(e, (BadInput, SweepTaken)) else first_line(e)
        if not multirun:
            fail(why)
        log.error("job %s not run: %s", out, why)  # its points count as lost at the end of the sweep, which
        return  # closes the parent: a SystemExit here would pass Hydra by and leave the parent RUNNING
    try:
        with stopping.graceful():
            stopping.checkpoint()
            collectors = measured(this, group, state, sweep, in_launcher)
        timed(collectors, out, time.perf_counter() - start, this.config.profile or this.config.report.profile_changed)
    except stopping.Signalled as e:
        if not in_launcher:
            raise  # this process runs the sweep: it ends the sweep
        return launcher_stopped(e, group, state, out, hc.launcher)
    except OSError as e:
        if e.errno in FATAL:
            raise stopping.Aborted(f"{e.strerror}: {e.filename or out}") from None
        log.error("job %s stopped by %s; the points it finished are kept in %s", out, e, out)
    except Exception as e:  # a harness bug: the end of the sweep counts the points it lost
        harness_error(out, e)
    if not multirun:
        ending.end(sweep, this.config.report, "run")


def harness_error(out: Path, e: Exception) -> None:
    """A harness bug stopped the job: one line, and with NNBENCH_DEBUG=1 its traceback, as the commands raise it."""
    log.error("job %s stopped by a harness error (%s); the points it finished are kept in %s", out, e, out)
    if os.environ.get("NNBENCH_DEBUG"):
        log.error("%s", traceback.format_exc())


def launcher_stopped(e: stopping.Signalled, group: list[tuple[Job, Path]], state: SweepState, out: Path,
                     launcher: DictConfig) -> None:
    """A signal stopped the job in a launcher's process (joblib, submitit, SLURM), where the process that runs the
    sweep counts and closes it: at a SLURM time limit the job exits to run again, or, not requeued, its points not
    measured fail with the reason; else one line."""
    if requeue.runs_again(e.signum):
        why = requeue.leave(e.signum, out)  # exits where SLURM runs the job again
        for job, directory in group:
            fail_the_rest(job, state, directory, f"the SLURM job reached its time limit (hydra.launcher."
                          f"timeout_min={launcher.get('timeout_min')}) before this point was measured, and "
                          f"was not requeued ({why}): raise hydra.launcher.timeout_min or "
                          "hydra.launcher.max_num_timeout")
        return
    log.error("job %s interrupted by %s; the points it finished are kept in %s", out, e, out)


def measured(this: Job, group: list[tuple[Job, Path]], state: SweepState, sweep: Sweep,
             in_launcher: bool) -> list[Points]:
    """The job's points, measured with its cell's other variants (paired), or on their own (unpaired): as `members`
    made them, tagged with their model's parity and without what an earlier run of the job saved."""
    if paired_engine.paired(this):
        return paired_engine.measure(group, state, sweep, in_launcher)
    ((job, directory),) = group
    cache = state.compile_cache(sweep.directory, job)
    return [unpaired_engine.run_job(job, directory, state, sweep, cache, in_launcher)]


def timed(collectors: list[Points], out: Path, wall_s: float, profile: bool) -> None:
    """Where the job's time went, in its dir (`nnbench overhead` reads it) and one log line."""
    times = JobTimes.total([c.times(wall_s) for c in collectors])
    (out / TIMES).write_text(times.to_json())
    profiling = f", {times.profiling_s:.2f} s profiling" if profile else ""
    log.info("job: %.2f s wall, %.2f s measuring%s, %.2f s fixed cost for %d points", times.wall_s,
             times.measuring_s, profiling, times.fixed_s, times.points)


def prepare(cfg: DictConfig, multirun: bool, sweep: Sweep, out: Path) -> tuple[Job, SweepState]:
    """The job, typed and validated (a sweep's callback has probed every job already), and the state of its sweep."""
    c = preflight.typed(cfg)
    if multirun:
        state = sweep.read()
        return state.todo(preflight.job(c), HydraConfig.get().job.num), state
    validated = commandline.VALIDATED
    this = validated.jobs[0] if validated and validated.jobs else preflight.jobs([c])[0]
    uri = validated.uri if validated else uris.validate(c.mlflow.tracking_uri, c.mlflow.experiment_name)
    state = opening.open_sweep(out, [this], uri, c.mlflow.experiment_name,
                               overrides=list(HydraConfig.get().overrides.task))
    return state.todo(this, 0), state


def members(this: Job, number: int, state: SweepState, sweep_dir: Path, out: Path,
            multirun: bool) -> list[tuple[Job, Path]]:
    """The jobs this one measures, each with its dir: itself; and, paired, its cell's other variants (each job's
    points in `out/job-<number>`). Each without the points resume found in the store or an earlier run of a
    requeued job saved (SLURM runs a requeued job from its start), tagged with its model's parity and FLOPs."""
    numbers = state.group(number)
    out_of = {n: sweepdir.job_dir(out, n) for n in numbers} if paired_engine.paired(this) else {number: out}
    group = []
    for n in numbers:
        fingerprint = state.fingerprints[n] if n < len(state.fingerprints) else this.fingerprint
        device = state.devices[n] if n < len(state.devices) else this.device
        job = this if n == number else state.todo(paired_engine.sibling(state.configs[n], fingerprint, device), n)
        job = dataclasses.replace(job, fingerprint=job.fingerprint or fingerprint, device=job.device or device,
                                  frameworks=proof.measured_with(state.configs, logged(job.config)["model"]))
        if multirun:
            job = requeue.again(job, state, out_of[n])
        group.append((proof.tagged(job, sweep_dir), out_of[n]))
    return group


def fail_the_rest(this: Job, state: SweepState, out: Path, reason: str) -> None:
    """A job stopped for good before all its points were measured: each of the rest becomes a FAILED run with
    `reason`, so the sweep ends with every point once."""
    done = requeue.saved(this, out)
    for point in [p for p in this.points if p.batch_size not in done]:
        rec = records.build(this, read(point, [PointResult(point.batch_size, failure=reason)]))
        directory = sweepdir.point_dir(out, rec.slug)
        rec.save(directory)
        log.info("%s: FAILED: %s", rec.run_name, reason)
        log_point(state, rec, directory)

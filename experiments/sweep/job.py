"""One Hydra job end to end: its checked job, its store (the sweep's, or opened here for a single run), each point
saved and then logged, interrupts, and for a single run the last line and the exit code. Parent side: this runs
in the process that runs the sweep, or in a launcher's process (joblib, submitit, SLURM).

A job never raises an Exception: Hydra's basic launcher would record it as a failed job, launch the next, and
then skip the end of the sweep (`on_multirun_end` is never called). Its faults become failed points or a logged line, and the end of the
sweep counts what is missing. Only `interrupts.Stop` (a BaseException) ends the sweep from here.
"""
from __future__ import annotations

import dataclasses
import errno
import logging
import signal
import time
from pathlib import Path

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

from experiments.common.errors import BadInput, fail, first_line
from experiments.common.job import Job
from experiments.common.protocol import Point, PointResult
from experiments.store import records, uris
from experiments.store.sweepdir import MARKER, PEAKS, Sweep, SweepState, SweepTaken
from experiments.sweep import commandline, ending, interrupts, points, preflight, requeue, state as states

log = logging.getLogger("nnbench")
FATAL = (errno.ENOSPC, errno.EDQUOT, errno.EROFS)  # no later point could be saved either: stop the sweep


def run(cfg: DictConfig) -> None:
    start, hc = time.perf_counter(), HydraConfig.get()
    interrupts.install(*requeue.signals())  # again in a launcher's process, where the entry point's handlers are not
    logging.raiseExceptions = False  # a full disk: no traceback per log line from Hydra's log file handler
    out, multirun = Path(hc.runtime.output_dir), hc.mode == RunMode.MULTIRUN
    in_launcher = multirun and states.ACTIVE is None  # a launcher's process (joblib, submitit, SLURM)
    if in_launcher:
        interrupts.defer()  # a signal while the job starts waits for its first checkpoint, below
    sweep = Sweep(Path(hc.sweep.dir).resolve() if multirun else out)
    c = preflight.as_dict(cfg)
    try:
        this, state = prepare(c, multirun, sweep, out)
        if multirun:
            this = requeue.again(this, state, out)  # SLURM runs a requeued job from its start
    except Exception as e:  # bad input, a taken sweep dir, a store or a state file that can't be read
        why = str(e) if isinstance(e, (BadInput, SweepTaken)) else first_line(e)
        if not multirun:
            fail(why)
        log.error("job %s not run: %s", out, why)  # its points count as lost at the end of the sweep, which
        return  # closes the parent: a SystemExit here would pass Hydra by and leave the parent RUNNING

    def on_measured(point: Point, process: int, result: PointResult, rec: records.Record | None,
                    directory: Path | None) -> None:
        if rec is None and not (interrupts.pending() and result.failure is not None):
            log.info("%s %s: process %d of %d %s", tick(sweep), records.run_name(this, point), process + 1,
                     this.processes, f"FAILED: {result.failure}" if result.failure else "measured")
            interrupts.checkpoint()  # a point's record comes after its last process
            return
        if interrupts.pending() and (rec is None or rec.outcome == "failed"):  # the signal stopped the worker
            if in_launcher and requeue.runs_again(interrupts.pending()):  # the job's next run measures it
                if directory is not None:
                    requeue.forget(directory)
                raise interrupts.Interrupted(interrupts.pending())
            rec = interrupted(rec or records.build(this, point, [result]), interrupts.pending())
            directory = out / "points" / rec.slug
            rec.save(directory)
        what = f"INTERRUPTED ({rec.tags['failure_reason']})" if rec.outcome == "interrupted" else points.summary(rec)
        log.info("%s %s: %s", tick(sweep), rec.run_name, what)
        kept.append((rec, directory))  # logged once the worker has ended: not beside a measurement
        if rec.outcome == "interrupted":
            raise interrupts.Interrupted(interrupts.pending())
        interrupts.checkpoint()

    def log_kept() -> None:
        while kept:
            log_point(state, *kept.pop(0))

    recs: list[records.Record] = []
    kept: list[tuple[records.Record, Path]] = []
    spent: dict[str, float] = {}
    try:
        with interrupts.graceful():
            interrupts.checkpoint()
            recs = points.run_job(this, out, on_measured, sweep.directory / PEAKS, after_worker=log_kept,
                                  cache=state.compile_cache(sweep.directory, this), machine=state.machine, spent=spent)
        times = points.JobTimes(time.perf_counter() - start, points.measuring_s(recs), len(recs),
                                profiling_s=points.profiling_s(recs), **spent)
        (out / points.TIMES).write_text(times.to_json())
        profiling = f", {times.profiling_s:.2f} s profiling" if this.profile else ""
        log.info("job: %.2f s wall, %.2f s measuring%s, %.2f s fixed cost for %d points", times.wall_s,
                 times.measuring_s, profiling, times.fixed_s, times.points)
    except interrupts.Interrupted as e:
        if not in_launcher:
            raise  # this process runs the sweep: it ends the sweep
        if requeue.runs_again(e.signum):
            why = requeue.leave(e.signum, out)  # exits where SLURM runs the job again
            fail_the_rest(this, state, out, f"the SLURM job reached its time limit (hydra.launcher.timeout_min="
                          f"{hc.launcher.get('timeout_min')}) before this point was measured, and was not requeued "
                          f"({why}): raise hydra.launcher.timeout_min or hydra.launcher.max_num_timeout")
            return
        log.error("job %s interrupted by %s; the points it finished are kept in %s", out, e, out)  # a launcher's
        return  # process (joblib, submitit, SLURM): the process that runs the sweep counts and closes it
    except OSError as e:
        if e.errno in FATAL:
            raise interrupts.Aborted(f"{e.strerror}: {e.filename or out}") from None
        log.error("job %s stopped by %s; the points it finished are kept in %s", out, e, out)
    except Exception as e:  # a harness bug: the end of the sweep counts the points it lost
        log.error("job %s stopped by a harness error (%s); the points it finished are kept in %s", out, e, out)
    if not multirun:
        ending.end(sweep, this.baseline, "run")


def prepare(c: dict, multirun: bool, sweep: Sweep, out: Path) -> tuple[Job, SweepState]:
    """The job, checked (a sweep's callback has probed every job already), and the state of its sweep."""
    if multirun:
        state = sweep.read()
        return state.todo(preflight.check(c), HydraConfig.get().job.num), state
    checked = commandline.CHECKED
    this = checked.jobs[0] if checked and checked.jobs else preflight.jobs([c])[0]
    uri = checked.uri if checked else uris.check(this.tracking_uri, this.experiment_name)
    state = states.open_sweep(out, [this], uri, this.experiment_name)
    return state.todo(this, 0), state


def log_point(state: SweepState, rec: records.Record, directory: Path) -> None:
    """The samples plot, then the run (its id to the marker first); a store failure costs only a logged line."""
    from experiments.report import plots  # matplotlib is slow to import: only once there is a point
    from experiments.store import tracking  # so is mlflow

    try:
        if rec.samples:
            plots.plot_samples(rec.samples, directory / "samples.png")
    except Exception as e:  # a plot must not cost the run
        log.error("could not draw the samples of %s (%s)", rec.run_name, first_line(e))
    try:
        tracking.log_record(state.uri, state.experiment_id, rec, directory, state.parent_run_id,
                            on_created=(directory / MARKER).write_text)
    except Exception as e:  # the record is on disk already; the sweep goes on
        log.error("could not log %s to %s (%s); it is kept in %s: log it later with `nnbench upload %s`",
                  rec.run_name, state.uri, first_line(e), directory, directory)


def fail_the_rest(this: Job, state: SweepState, out: Path, reason: str) -> None:
    """A job stopped for good before all its points were measured: each of the rest becomes a FAILED run with
    `reason`, so the sweep ends with every point once."""
    done = requeue.saved(this, out)
    for point in [p for p in this.points if p.batch_size not in done]:
        rec = records.build(this, point, [PointResult(point.batch_size, failure=reason)])
        directory = out / "points" / rec.slug
        rec.save(directory)
        log.info("%s: FAILED: %s", rec.run_name, reason)
        log_point(state, rec, directory)


def tick(sweep: Sweep) -> str:
    """The progress count (a full disk must not stop the logging of what is measured)."""
    try:
        return sweep.tick()
    except OSError:
        return "[?]"


def interrupted(rec: records.Record, signum: int) -> records.Record:
    """The point the worker was measuring when the signal came: kept as interrupted (MLflow status KILLED)."""
    reason = f"interrupted by {signal.Signals(signum).name} while this point was measuring"
    return dataclasses.replace(rec, outcome="interrupted",
                               tags=rec.tags | {"outcome": "interrupted", "failure_reason": reason,
                                                records.NOTE: f"INTERRUPTED: {reason}"})

"""The unpaired engine (bench.paired=false, and framework=external's runners, which time themselves): a job's points
measured by `bench.processes` fresh workers one after another, each measuring every point once; then the load
rule's extra workers, and with profile=true one more worker that profiles the saved points. What the workers report
goes to the job's collector (`sweep.points`). Parent side."""
from __future__ import annotations

import dataclasses
import logging
import time
import traceback
from functools import partial
from pathlib import Path
from typing import Callable

import numpy as np
import yaml

from experiments.common.config import EXTERNAL, logged
from experiments.common.job import Job
from experiments.common.protocol import PointResult, Request
from experiments.harness import external, manager
from experiments.measure.backends import Unsupported, validate_side
from experiments.measure.machine import prior
from experiments.store.sweepdir import Sweep, SweepState
from experiments.sweep import stopping
from experiments.sweep.points import Points

log = logging.getLogger("nnbench")


def run_job(job: Job, job_dir: Path, state: SweepState | None = None, sweep: Sweep | None = None,
            cache: Path | None = None, in_launcher: bool = False) -> Points:
    """Measure every point of the job in `bench.processes` fresh workers, one after another; each worker measures
    every point, so a point's processes are interleaved with the other points'. Faults become failed records;
    nothing raises but an interrupt.

    `cache`: the sweep's compile cache for this job's environment (None: none). Workers are forked by one fork
    server per job (runtime.start=fork) or spawned. Each process stops sampling an op once more samples cannot
    narrow its re-run interval: its CI is a fraction of the spread between the processes so far (`between`), or of
    a prior before two processes have measured: bench.between_prior, or the sweep's machine check's drift if larger.
    With profile=true one more worker then profiles the saved points: never while a point is timed.
    """
    job_dir.mkdir(parents=True, exist_ok=True)
    (job_dir / "config.yaml").write_text(yaml.safe_dump(logged(job.config), sort_keys=False))
    collector = Points(job, job_dir, state, sweep, in_launcher)
    if not job.points:  # resume=true found them all in the store
        return collector
    if (why := lacks(job)) is not None:  # no worker to start: every point is skipped, with the reason
        collector.skip_all(why)
        return collector
    t0 = time.perf_counter()
    measure, server = measurer(job, job_dir, cache)
    spent = {"server_s": time.perf_counter() - t0}
    peaks = collector.peaks and collector.peaks.resolve()
    try:
        for r in range(job.config.bench.processes):
            spread = between(collector.results, {op for p in job.points for op in p.ops},
                             prior(collector.machine, job.config.bench.between_prior))
            measure_process(collector, r, job.request(peaks, spread), measure)
        remeasure(collector, job.request(peaks, spread), measure)
        if collector.waiting:
            try:
                profile(collector, measure)
            finally:
                collector.log_queued()
    finally:
        if server is not None:
            manager.done(server)
        collector.spent = spent | collector.workers_spent()
    return collector


def lacks(job: Job) -> str | None:
    """Why none of the job's points can run in its framework (a user's network without that framework's module),
    in the words a worker would use; None: they can."""
    try:
        validate_side(job.spec, str(job.config.framework.name))
    except Unsupported as e:
        return str(e)
    return None


def measurer(job: Job, job_dir: Path, cache: Path | None) -> tuple[Callable, manager.ForkServer | None]:
    """How the job's workers are run: a runner in any language in their place, or nnbench's own, forked by the job's
    fork server (`Job.start`: runtime.start=fork, on the CPU, when it can start) or spawned; and that server."""
    c = job.config
    if c.framework.name == EXTERNAL:
        return partial(external.run, runner=external.Runner(c.external.command, c.external.name, job.python)), None
    server = None
    if job.start == "fork":
        try:
            environ = manager.environ(str(c.runtime.allocator), cache)
            server = manager.fork_server(job.python, str(c.framework.name), environ, job_dir / "server.log")
        except manager.ServerUnavailable as e:
            log.warning("job %s spawns its workers: its fork server could not start (%s)", job_dir, e)
    return partial(manager.run, launcher=manager.Launcher(job.python, str(c.runtime.allocator), cache, server)), server


def between(results: list[list[PointResult]], ops: set[str], prior: float) -> dict[str, float]:
    """Per op, the spread between processes so far: the median over the job's points of the SD of the log of
    their process medians, where some point has two; else `prior`."""
    spreads: dict[str, list[float]] = {op: [] for op in ops}
    for per_point in results:
        for op in ops:
            medians = [float(np.median(r.ops[op].measurement.samples_s)) for r in per_point
                       if op in r.ops and r.ops[op].status == "ok"]
            if len(medians) >= 2:
                spreads[op].append(float(np.std(np.log(medians), ddof=1)))
    return {op: float(np.median(sds)) if sds else prior for op, sds in spreads.items()}


def measure_process(collector: Points, r: int, request: Request, measure: Callable) -> None:
    """Process r of every point of the job: one worker measures them all, in order; then what it finished is
    logged. A harness fault fails the points it had left; an interrupt keeps the points measured to the end."""
    try:
        measure(request, collector.job_dir / f"process-{r}", collector.job.config.bench.timeout_s,
                on_result=partial(collector.take, r))
    except Exception:  # a harness bug must not stop the sweep either
        collector.failed(r, traceback.format_exc())
    except stopping.Signalled as e:  # the points measured to the end keep their timings, unprofiled
        collector.stopped(e)
        raise
    finally:
        collector.log_queued()


def remeasure(collector: Points, request: Request, measure: Callable) -> None:
    """The load rule: at most `bench.remeasure` more workers, one after another, each measuring the held points once
    more (`Points.retake`): a process read far off its siblings while other programs used the CPU is measured again.
    A point a worker left, or still far after the last one, keeps the processes it has."""
    bench = collector.job.config.bench
    for k in range(bench.remeasure):
        if not collector.held:
            return
        try:
            measure(dataclasses.replace(request, points=collector.held_points()),
                    collector.job_dir / f"process-{bench.processes + k}", bench.timeout_s,
                    on_result=partial(collector.retake, last=k == bench.remeasure - 1))
        except Exception:  # a harness bug must not stop the sweep either: the points keep what they have
            log.error("measuring far processes again failed: %s", traceback.format_exc().splitlines()[-1])
        except stopping.Signalled as e:  # every point keeps what it has, unprofiled
            collector.stop_remeasuring(e)
            raise
        finally:
            collector.next_round()  # the points this worker left are saved; those still far wait for the next
            collector.log_queued()


def profile(collector: Points, measure: Callable) -> None:
    """One more worker profiles the saved points (their measured ops). A fault in the profiling fails the profile,
    never the point; an interrupt keeps every point with the timings it has."""
    out = collector.job_dir / "process-profile"
    request = dataclasses.replace(collector.job.request(), profile_dir=str(out / "files"),
                                  points=collector.to_profile())
    try:
        measure(request, out, collector.job.config.bench.timeout_s, on_result=collector.profiled)
    except Exception:  # a harness bug must not stop the sweep either
        collector.profiling_failed(traceback.format_exc())

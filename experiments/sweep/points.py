"""A job's points, measured in `bench.processes` fresh workers one after another; each point's record is built after
its last process and saved in its dir; with profile=true one more worker then profiles the points, and each record
is saved again with its profile added; then it is handed on to be logged. Parent side."""
from __future__ import annotations

import contextlib
import dataclasses
import logging
import signal
import time
import traceback
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Callable

import numpy as np
import yaml

from experiments.common.config import logged
from experiments.common.job import Job
from experiments.common.protocol import PARTS, Json, Point, PointResult, Request
from experiments.harness import external, manager
from experiments.measure.machine import MachineCheck, prior
from experiments.store import records
from experiments.sweep import interrupts

log = logging.getLogger("nnbench")
EXTERNAL = "framework=external runs a runner in another language: nnbench profiles only its own backends"
TIMES = "job.json"


@dataclass(frozen=True)
class JobTimes(Json):
    """Where a job's wall time went (`nnbench overhead --sweep` reads it)."""

    wall_s: float
    measuring_s: float  # inside the timing harness: first calls, warm-up and samples
    points: int
    op_points: int = 0  # ops measured, counted once per process: what the sampling floor multiplies
    server_s: float = 0.0  # starting the fork server: the interpreter and the framework's imports, once
    startup_s: float = 0.0  # the workers' starts to their first op (a spawned worker's imports)
    first_calls_s: float = 0.0  # compiles (or cache loads) and first runs
    warmup_s: float = 0.0
    sampling_s: float = 0.0
    logging_s: float = 0.0  # plots and the store, between workers
    profiling_s: float = 0.0  # profile=true: inside the profiling worker, from each op's build to its files

    @property
    def fixed_s(self) -> float:
        """Worker starts, imports, model builds, plots and logging."""
        return self.wall_s - self.measuring_s - self.profiling_s


Measured = Callable[[Point, int, PointResult, "records.Record | None", "Path | None"], None]


def run_job(job: Job, job_dir: Path, on_measured: Measured = lambda *a: None, peaks: Path | None = None,
            after_worker: Callable[[], None] = lambda: None, cache: Path | None = None,
            machine: MachineCheck | None = None, spent: dict[str, float] | None = None) -> list[records.Record]:
    """Measure every point of the job in `bench.processes` fresh workers, one after another; each worker
    measures every point, so a point's processes are interleaved with the others' points.

    `on_measured(point, process, result, record, directory)` hears of each point as each process reports it;
    after the last process the point's record is built, saved in its directory, and passed along (else None).
    It must stay light: the worker is measuring the next point meanwhile. Heavy work (plots, the store) waits
    for `after_worker`, called once each worker has ended: logging beside a worker took up to a core
    (its points read `noisy`, 0.8-1.0 other cores, 56 ms for a 0.6 ms call). Measurement faults become failed
    records; nothing raises but an interrupt.

    `cache`: the sweep's compile cache for this job's environment (None: none). Workers are forked by one fork
    server per job (runtime.start=fork) or spawned. Each process stops sampling an op once more samples cannot
    narrow its re-run interval: its CI is a fraction of the spread between the processes so far (`between`), or of
    a prior before two processes have measured: bench.between_prior, or the `machine` check's drift if larger.
    `spent` receives where the time went (JobTimes' fields).

    With profile=true the points measured are saved first, then profiled by one more worker (`profile`), and
    passed along once profiled: the profiler never runs while a point is timed, and a profile adds to a saved
    record without changing any of its timings.
    """
    job_dir.mkdir(parents=True, exist_ok=True)
    (job_dir / "config.yaml").write_text(yaml.safe_dump(logged(job.config), sort_keys=False))
    if not job.points:  # resume=true found them all in the store
        return []
    c = job.config
    n, server, spent = c.bench.processes, None, {} if spent is None else spent
    t0 = time.perf_counter()
    if c.framework.name == "external":  # a runner in any language, in the worker's place
        measure = partial(external.run, template=c.external.command, name=c.external.name, python=job.python)
    else:
        environ = manager.environ(str(c.runtime.allocator), cache)
        if c.runtime.start == "fork":
            try:
                server = manager.ForkServer(job.python, str(c.framework.name), environ, job_dir / "server.log")
            except manager.ServerUnavailable as e:
                log.warning("job %s spawns its workers: its fork server could not start (%s)", job_dir, e)
        measure = partial(manager.run, python=job.python, allocator=str(c.runtime.allocator), cache=cache,
                          server=server)
    spent["server_s"], spent["logging_s"] = time.perf_counter() - t0, 0.0

    def log_between() -> None:
        t = time.perf_counter()
        after_worker()
        spent["logging_s"] += time.perf_counter() - t

    results: list[list[PointResult]] = [[] for _ in job.points]
    recs: list[records.Record] = []
    to_profile: list[tuple[Point, records.Record, Path]] = []
    try:
        for r in range(n):
            spread = between(results, {op for p in job.points for op in p.ops},
                             prior(machine, c.bench.between_prior))
            request = job.request(peaks and peaks.resolve(), spread)
            measure_process(job, job_dir, r, request, results, recs, to_profile, measure, on_measured, log_between,
                            machine)
        if to_profile:
            try:
                recs += profile(job, job_dir, to_profile, measure, on_measured)
            finally:
                log_between()
    finally:
        if server is not None:
            server.close()
        ms = [o.measurement for per_point in results for r in per_point for o in r.ops.values() if o.measurement]
        spent |= {"op_points": len(ms), "startup_s": sum(r.startup_s or 0 for p in results for r in p),
                  "first_calls_s": sum(m.first_call_s for m in ms if m.first_call_s == m.first_call_s),  # NaN: a runner
                  "warmup_s": sum(m.warmup_s for m in ms),
                  "sampling_s": sum(m.sampling_s for m in ms)}
    return recs


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


def measure_process(job: Job, job_dir: Path, r: int, request: Request, results: list[list[PointResult]],
                    recs: list[records.Record], to_profile: list[tuple[Point, records.Record, Path]],
                    measure: Callable, on_measured: Measured, after_worker: Callable[[], None],
                    machine: MachineCheck | None = None) -> None:
    """Process r of every point of the job: one worker measures them all, in order. After the last process each
    point's record is built and saved; with profile=true it waits in `to_profile` to be profiled."""
    n, external_runner = job.config.bench.processes, job.config.framework.name == "external"
    order = iter(range(len(job.points)))  # a worker reports its points in order

    def take(result: PointResult) -> None:
        i = next(order)
        results[i].append(result)
        if r < n - 1:
            return on_measured(job.points[i], r, result, None, None)
        try:
            rec = records.build(job, job.points[i], results[i], machine)
        except Exception:  # a harness bug fails this point, not the sweep
            failed = PointResult(job.points[i].batch_size, failure="harness error", stderr_tail=traceback.format_exc())
            rec = records.build(job, job.points[i], [failed])
        if job.config.profile and external_runner:
            rec = records.without_profile(rec, "unavailable", EXTERNAL)
        directory = job_dir / "points" / rec.slug
        rec.save(directory)
        if job.config.profile and rec.outcome == "ok" and not external_runner:
            to_profile.append((job.points[i], rec, directory))  # saved: its timings are final
            return on_measured(job.points[i], r, result, None, None)
        recs.append(rec)
        on_measured(job.points[i], r, result, rec, directory)

    try:
        measure(request, job_dir / f"process-{r}", job.config.bench.timeout_s, on_result=take)
    except Exception:  # a harness bug must not stop the sweep either
        reason = traceback.format_exc()
        for p in [p for p, got in zip(job.points, results) if len(got) == r]:
            take(PointResult(p.batch_size, failure="harness error", stderr_tail=reason))
    except interrupts.Interrupted as e:  # the points measured to the end keep their timings, unprofiled
        for point, rec, directory in to_profile:
            rec = records.without_profile(rec, "interrupted", f"interrupted by {e} before it was profiled")
            rec.save(directory)
            with contextlib.suppress(interrupts.Interrupted):  # raised once, below
                on_measured(point, r, PointResult(point.batch_size), rec, directory)
        raise
    finally:
        after_worker()


def profile(job: Job, job_dir: Path, todo: list[tuple[Point, records.Record, Path]], measure: Callable,
            on_measured: Measured) -> list[records.Record]:
    """One more worker profiles the saved points (their measured ops); each record is saved again with its profile
    and passed along. A fault in the profiling fails the profile, never the point; an interrupt keeps every point
    with the timings it has."""
    out, done = job_dir / "process-profile", []
    request = dataclasses.replace(job.request(), profile_dir=str(out / "files"),
                                  points=tuple(Point(p.batch_size, tuple(op for op in p.ops if op in rec.samples))
                                               for p, rec, _ in todo))
    order = iter(todo)

    def take(result: PointResult) -> None:
        point, rec, directory = next(order)
        try:
            rec = records.add_profile(rec, result, out / "files" / f"bs{point.batch_size}", directory)
        except Exception:  # a harness bug fails this profile, not the point
            rec = records.without_profile(rec, "failed", f"harness error\n{traceback.format_exc()}")
        signum = interrupts.pending() if result.failure is not None else None
        why = f"interrupted by {signal.Signals(signum).name} before it was profiled" if signum else ""
        if not signum:
            return keep(point, result, rec, directory)
        for point, rec, directory in [(point, rec, directory), *order]:
            with contextlib.suppress(interrupts.Interrupted):  # raised once, below
                keep(point, result, records.without_profile(rec, "interrupted", why), directory)
        raise interrupts.Interrupted(signum)

    def keep(point: Point, result: PointResult, rec: records.Record, directory: Path) -> None:
        rec.save(directory)
        done.append(rec)
        on_measured(point, job.config.bench.processes, result, rec, directory)

    try:
        measure(request, out, job.config.bench.timeout_s, on_result=take)
    except Exception:  # a harness bug must not stop the sweep either
        reason = traceback.format_exc()
        for point, _, _ in list(order):
            take(PointResult(point.batch_size, failure="harness error", stderr_tail=reason))
    return done


def summary(rec: records.Record) -> str:
    """One readable line per point for the console."""
    if rec.outcome == "failed":
        return "FAILED: " + rec.tags["failure_reason"].splitlines()[0]
    parts = []
    for op in rec.params["ops"].split(","):
        if op in rec.samples:
            m = rec.metrics
            parts.append(f"{op} {m[f'{op}_median_s'] * 1e3:.3f} ms "
                         f"[{m[f'{op}_ci95_low_s'] * 1e3:.3f}, {m[f'{op}_ci95_high_s'] * 1e3:.3f}]")
        elif f"skip_reason_{op}" in rec.tags:
            parts.append(f"{op} skipped ({rec.tags[f'skip_reason_{op}']})")
    if rec.tags.get("noisy") == "true":
        busy = records.max_background_cores(rec.metrics)
        parts.append(f"NOISY: other processes used {busy:.2f} cores while it was measured")
    if rec.tags.get("unstable") == "true":
        parts.append(f"UNSTABLE: {rec.tags['unstable_hint']}")
    if rec.tags.get("profile", "ok") != "ok":
        parts.append(f"profile {rec.tags['profile']}: {rec.tags['profile_reason'].splitlines()[0]}")
    for op in rec.params["ops"].split(",") if rec.tags.get("profile") == "ok" else ():
        m = {p: rec.metrics.get(f"{op}_time_{p}_s") for p in PARTS}
        if m["overhead"] is not None:
            top = max(m, key=lambda p: m[p])
            parts.append(f"{op} profiled: {rec.metrics[f'{op}_profile_wall_s'] * 1e3:.3f} ms "
                         f"({rec.metrics[f'{op}_profile_wall_ratio']:.2f}× the median), most in {top} "
                         f"({m[top] * 1e3:.3f} ms)")
    return "; ".join(parts)


def measuring_s(recs: list[records.Record]) -> float:
    """Time spent inside the timing harness (first calls and warm-up included)."""
    return sum(s["elapsed_s"] for r in recs for s in r.samples.values())


def profiling_s(recs: list[records.Record]) -> float:
    """Time spent profiling inside the profiling worker (each op's build, first call and files included)."""
    return sum(v for r in recs for k, v in r.metrics.items() if k.endswith("_profile_elapsed_s"))

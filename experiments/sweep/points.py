"""A job's points, measured in `bench.processes` fresh workers one after another; each point's record is built after
its last process and saved in its dir; with profile=true one more worker then profiles the points, and each record
is saved again with its profile added; then it is handed on to be logged. Parent side."""
from __future__ import annotations

import contextlib
import dataclasses
import signal
import traceback
from functools import partial
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import yaml

from experiments.common.job import Job
from experiments.common.protocol import PARTS, Json, Point, PointResult
from experiments.harness import external, manager
from experiments.store import records
from experiments.sweep import interrupts

EXTERNAL = "framework=external runs a runner in another language: nnbench profiles only its own backends"

TIMES = "job.json"


@dataclass(frozen=True)
class JobTimes(Json):
    """Where a job's wall time went (`nnbench overhead --sweep` reads it)."""

    wall_s: float
    measuring_s: float  # inside the timing harness: first calls, warm-up and samples
    points: int
    profiling_s: float = 0.0  # profile=true: inside the profiling worker, from each op's build to its files

    @property
    def fixed_s(self) -> float:
        """Worker starts, imports, model builds, plots and logging."""
        return self.wall_s - self.measuring_s - self.profiling_s


Measured = Callable[[Point, int, PointResult, "records.Record | None", "Path | None"], None]


def run_job(job: Job, job_dir: Path, on_measured: Measured = lambda *a: None, peaks: Path | None = None,
            after_worker: Callable[[], None] = lambda: None) -> list[records.Record]:
    """Measure every point of the job in `bench.processes` fresh workers, one after another; each worker
    measures every point, so a point's processes are interleaved with the others' points.

    `on_measured(point, process, result, record, directory)` hears of each point as each process reports it;
    after the last process the point's record is built, saved in its directory, and passed along (else None).
    It must stay light: the worker is measuring the next point meanwhile. Heavy work (plots, the store) waits
    for `after_worker`, called once each worker has ended: logging beside a worker took up to a core
    (its points read `noisy`, 0.8-1.0 other cores, 56 ms for a 0.6 ms call). Measurement faults become failed
    records; nothing raises but an interrupt.

    With profile=true the points measured are saved first, then profiled by one more worker (`profile`), and
    passed along once profiled: the profiler never runs while a point is timed, and a profile adds to a saved
    record without changing any of its timings.
    """
    job_dir.mkdir(parents=True, exist_ok=True)
    (job_dir / "config.yaml").write_text(yaml.safe_dump(job.cfg, sort_keys=False))
    if not job.points:  # resume=true found them all in the store
        return []
    n = job.processes
    if job.framework == "external":  # a runner in any language, in the worker's place
        measure = partial(external.run, template=job.external_command, name=job.external_name)
    else:
        measure = partial(manager.run, python=job.python, allocator=job.allocator)
    results: list[list[PointResult]] = [[] for _ in job.points]
    recs: list[records.Record] = []
    to_profile: list[tuple[Point, records.Record, Path]] = []
    request = job.request(peaks and peaks.resolve())
    for r in range(n):
        order = iter(range(len(job.points)))  # a worker reports its points in order

        def take(result: PointResult, r: int = r) -> None:
            i = next(order)
            results[i].append(result)
            if r < n - 1:
                return on_measured(job.points[i], r, result, None, None)
            try:
                rec = records.build(job, job.points[i], results[i])
            except Exception:  # a harness bug fails this point, not the sweep
                failed = PointResult(job.points[i].batch_size, failure="harness error", stderr_tail=traceback.format_exc())
                rec = records.build(job, job.points[i], [failed])
            if job.profile and job.framework == "external":
                rec = records.without_profile(rec, "unavailable", EXTERNAL)
            directory = job_dir / "points" / rec.slug
            rec.save(directory)
            if job.profile and rec.outcome == "ok" and job.framework != "external":
                to_profile.append((job.points[i], rec, directory))  # saved: its timings are final
                return on_measured(job.points[i], r, result, None, None)
            recs.append(rec)
            on_measured(job.points[i], r, result, rec, directory)

        try:
            measure(request, job_dir / f"process-{r}", job.timeout_s, on_result=take)
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
    if to_profile:
        try:
            recs += profile(job, job_dir, to_profile, measure, on_measured)
        finally:
            after_worker()
    return recs


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
        on_measured(point, job.processes, result, rec, directory)

    try:
        measure(request, out, job.timeout_s, on_result=take)
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

"""A job's points, measured in `bench.processes` fresh workers one after another; each point's record is built after
its last process, saved in its dir and handed on to be logged. Parent side."""
from __future__ import annotations

import traceback
from functools import partial
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import yaml

from experiments.common.job import Job
from experiments.common.protocol import Json, Point, PointResult
from experiments.harness import external, manager
from experiments.store import records

TIMES = "job.json"


@dataclass(frozen=True)
class JobTimes(Json):
    """Where a job's wall time went (`nnbench overhead --sweep` reads it)."""

    wall_s: float
    measuring_s: float  # inside the timing harness: first calls, warm-up and samples
    points: int

    @property
    def fixed_s(self) -> float:
        """Worker starts, imports, model builds, plots and logging."""
        return self.wall_s - self.measuring_s


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
    """
    job_dir.mkdir(parents=True, exist_ok=True)
    (job_dir / "config.yaml").write_text(yaml.safe_dump(job.cfg, sort_keys=False))
    if not job.points:  # resume=true found them all in the store
        return []
    n = job.processes
    if job.framework == "external":  # a runner in any language, in the worker's place
        measure = partial(external.run, template=job.external_command, name=job.external_name, python=job.python)
    else:
        measure = partial(manager.run, python=job.python, allocator=job.allocator)
    results: list[list[PointResult]] = [[] for _ in job.points]
    recs: list[records.Record] = []
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
            directory = job_dir / "points" / rec.slug
            rec.save(directory)
            recs.append(rec)
            on_measured(job.points[i], r, result, rec, directory)

        try:
            measure(request, job_dir / f"process-{r}", job.timeout_s, on_result=take)
        except Exception:  # a harness bug must not stop the sweep either
            reason = traceback.format_exc()
            for p in [p for p, got in zip(job.points, results) if len(got) == r]:
                take(PointResult(p.batch_size, failure="harness error", stderr_tail=reason))
        finally:
            after_worker()
    return recs


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
    return "; ".join(parts)


def measuring_s(recs: list[records.Record]) -> float:
    """Time spent inside the timing harness (first calls and warm-up included)."""
    return sum(s["elapsed_s"] for r in recs for s in r.samples.values())

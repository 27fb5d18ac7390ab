"""One Hydra job: measure its points in a fresh child, keep each record on disk, hand it on to be logged."""
from __future__ import annotations

import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import yaml

from experiments import child, records
from experiments.preflight import Job
from experiments.protocol import Json, PointResult

TIMES = "job.json"


@dataclass(frozen=True)
class JobTimes(Json):
    """Where a job's wall time went (`python -m experiments.overhead --sweep` reads it)."""

    wall_s: float
    measuring_s: float  # inside the timing harness: first calls, warm-up and samples
    points: int

    @property
    def fixed_s(self) -> float:
        """Child start, imports, model builds, plots and logging."""
        return self.wall_s - self.measuring_s


def run_job(job: Job, job_dir: Path,
            on_record: Callable[[records.Record, Path], None] = lambda r, d: None) -> list[records.Record]:
    """Measure every point of the job; each record is saved in its directory, then handed to `on_record`.

    Measurement faults become failed records; nothing raises.
    """
    job_dir.mkdir(parents=True, exist_ok=True)
    (job_dir / "config.yaml").write_text(yaml.safe_dump(job.cfg, sort_keys=False))
    recs: list[records.Record] = []

    def record(result: PointResult) -> None:
        rec = records.build(job.cfg, job.points[len(recs)], result, job.spec.param_count())
        directory = job_dir / "points" / rec.slug
        rec.save(directory)
        if rec.samples:
            from experiments import report  # matplotlib: only once there is something to draw

            report.plot_samples(rec.samples, directory / "samples.png")
        recs.append(rec)
        on_record(rec, directory)

    try:
        child.run(job.request(), job_dir, job.cfg["bench"]["timeout_s"], job.python, record)
    except Exception:  # a harness bug must not stop the sweep either
        reason = traceback.format_exc()
        for p in job.points[len(recs):]:
            record(PointResult(p.batch_size, failure="harness error", stderr_tail=reason))
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
    return "; ".join(parts)


def measuring_s(recs: list[records.Record]) -> float:
    """Time spent inside the timing harness (first calls and warm-up included)."""
    return sum(s["elapsed_s"] for r in recs for s in r.samples.values())

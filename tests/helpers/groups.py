"""A paired group measured in this process, as a sweep's leader measures it (`paired_engine.run_group`) but without
Hydra or a store: each job's points read, judged and saved under `<directory>/job-<i>/points/`, the trials in
`<directory>/trials/`."""
from __future__ import annotations

from pathlib import Path

from experiments.common.job import Job
from experiments.store import sweepdir
from experiments.sweep import paired_engine
from experiments.sweep.points import Points


def measured_together(jobs: list[Job], directory: Path, caches: list[Path | None] | None = None) -> list[Points]:
    """The jobs (one group: they differ only in variant keys) measured paired; each job's collector, its `records`
    saved, none logged."""
    collectors = [Points(job, sweepdir.job_dir(directory, i), ticks=False) for i, job in enumerate(jobs)]
    paired_engine.run_group(jobs, collectors, directory, caches or [None] * len(jobs), None)
    return collectors

"""What a sweep's jobs share: one state file in the sweep dir (store, experiment, parent run, point count).

It is the only channel: jobs on other processes or hosts find the parent run there, so the sweep dir must
be on a disk they all see (as Hydra's launchers assume for their own outputs).
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from experiments.preflight import Job
from experiments.protocol import Json

STATE, PROGRESS, PEAKS = "nnbench-sweep.json", "nnbench-progress.log", "nnbench-peaks.json"


@dataclass(frozen=True)
class SweepState(Json):
    uri: str  # the MLflow store every job logs to
    experiment_id: str
    parent_run_id: str | None  # None for a single run (no -m)
    jobs: int | None  # None: a sweeper whose jobs can't be listed in advance
    points: int | None
    start: float
    measurements: int | None = None  # points × processes: what the progress counts


class Sweep:
    """The state file and the progress count of one sweep dir (a single run's output dir is its own sweep)."""

    def __init__(self, directory: Path):
        self.directory = directory
        self.state, self.progress = directory / STATE, directory / PROGRESS

    @classmethod
    def above(cls, path: Path) -> "Sweep | None":
        """The sweep whose dir holds `path` (a job or point dir), if any."""
        for d in (path, *path.parents):
            if (d / STATE).exists():
                return cls(d)
        return None

    def start(self, state: SweepState) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        self.state.write_text(state.to_json())
        self.progress.write_text("")

    def read(self) -> SweepState:
        return SweepState.from_json(self.state.read_text())

    def tick(self) -> str:
        """Count one finished point; '[done/total, ETA]' for the console."""
        with open(self.progress, "a") as f:
            f.write(".")
        state, done = self.read(), self.progress.stat().st_size
        total = state.measurements or state.points or done
        eta = (time.time() - state.start) / done * max(total - done, 0)
        return f"[{done}/{total}, ETA {int(eta) // 60}:{int(eta) % 60:02d}]"


def open_sweep(directory: Path, jobs: list[Job] | None, mlflow_cfg, parent: str | None = None,
               params: dict[str, str] | None = None) -> SweepState:
    """Open the store (created once, before any job logs), start the sweep's parent run, write the state.

    `parent`: the parent run's name (with its `params`), or None for a single run. Raises StoreUnavailable.
    """
    from experiments import tracking  # mlflow is slow to import: only once the input is known good

    uri = tracking.store_uri(mlflow_cfg.tracking_uri)
    exp_id = tracking.open_store(uri, mlflow_cfg.experiment_name)
    n_jobs, points = (len(jobs), sum(len(j.points) for j in jobs)) if jobs is not None else (None, None)
    measurements = sum(len(j.points) * j.cfg["bench"]["processes"] for j in jobs) if jobs is not None else None
    run_id = None
    if parent is not None:
        run_id = tracking.start_parent(uri, exp_id, parent, {**(params or {}), "job_count": n_jobs,
                                                              "point_count": points})
    state = SweepState(uri, exp_id, run_id, n_jobs, points, time.time(), measurements)
    Sweep(directory).start(state)
    return state

"""What a sweep's jobs share: one state file in the sweep dir (store, experiment, parent run, point count).

It is the only channel: jobs on other processes or hosts find the parent run there, so the sweep dir must
be on a disk they all see (as Hydra's launchers assume for their own outputs). The launching process holds a
lock file beside it while the sweep runs, so `upload` and later sweeps can tell a live sweep from a dead one.
"""
from __future__ import annotations

import fcntl
import logging
import os
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from experiments.preflight import Job
from experiments.protocol import Json

log = logging.getLogger("nnbench")

STATE, PROGRESS, PEAKS = "nnbench-sweep.json", "nnbench-progress.log", "nnbench-peaks.json"
LOCK = "nnbench-sweep.lock"
MARKER = "mlflow_run_id"  # in a point dir: the id of its run, written as soon as the run is created
_held: list[int] = []  # lock file descriptors, open for the life of the process


@dataclass(frozen=True)
class SweepState(Json):
    uri: str  # the MLflow store every job logs to
    experiment_id: str
    parent_run_id: str | None  # None for a single run (no -m)
    jobs: int | None  # None: a sweeper whose jobs can't be listed in advance
    points: int | None
    start: float
    measurements: int | None = None  # points × processes: what the progress counts
    ended: str | None = None  # how it ended: finished, incomplete, interrupted or stopped; None while it runs
    resumed: dict[str, list[int]] = field(default_factory=dict)  # job number -> batch sizes already in the store

    def todo(self, job: Job, number: int) -> Job:
        """The job without the points that resume=true found FINISHED in the store."""
        return without(job, self.resumed.get(str(number), []))


def without(job: Job, batch_sizes: list[int]) -> Job:
    return replace(job, points=tuple(p for p in job.points if p.batch_size not in batch_sizes))


class SweepTaken(Exception):
    """The directory already belongs to another sweep."""


class Sweep:
    """The state file and the progress count of one sweep dir (a single run's output dir is its own sweep)."""

    def __init__(self, directory: Path):
        self.directory = directory
        self.state, self.progress, self.lock = directory / STATE, directory / PROGRESS, directory / LOCK

    @classmethod
    def above(cls, path: Path) -> "Sweep | None":
        """The sweep whose dir holds `path` (a job or point dir), if any."""
        for d in (path, *path.parents):
            if (d / STATE).exists():
                return cls(d)
        return None

    def start(self, state: SweepState) -> None:
        """Claim the directory (lock, then a state file that must not exist yet) and write the state."""
        self.directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.lock, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            with open(self.state, "x") as f:
                f.write(state.to_json())
        except (BlockingIOError, FileExistsError):
            os.close(fd)
            raise SweepTaken(f"{self.directory} already holds another sweep ({STATE}): choose another "
                             "hydra.sweep.dir (or hydra.run.dir)") from None
        _held.append(fd)
        self.progress.write_text("")

    def read(self) -> SweepState:
        return SweepState.from_json(self.state.read_text())

    def write(self, state: SweepState) -> None:
        """Replace the state atomically: a full disk leaves the old one, never half a file."""
        tmp = self.state.with_name(STATE + ".tmp")
        tmp.write_text(state.to_json())
        os.replace(tmp, self.state)

    def end(self, how: str) -> None:
        """Record how the sweep ended (best effort: the disk may be full)."""
        try:
            self.write(replace(self.read(), ended=how))
        except OSError:
            pass

    def running(self) -> bool:
        """Whether a live process still holds this sweep's lock."""
        try:
            fd = os.open(self.lock, os.O_RDWR)
        except FileNotFoundError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return False
        except BlockingIOError:
            return True
        finally:
            os.close(fd)  # releases only this descriptor's lock, never the holder's

    def point_dirs(self) -> list[Path]:
        """Every point saved under the sweep (a record.json is written last, so a half-saved point is not one)."""
        from experiments.records import META

        return sorted(p.parent for p in self.directory.glob(f"**/points/*/{META}"))

    def tick(self) -> str:
        """Count one finished point; '[done/total, ETA]' for the console."""
        with open(self.progress, "a") as f:
            f.write(".")
        state, done = self.read(), self.progress.stat().st_size
        total = state.measurements or state.points or done
        eta = (time.time() - state.start) / done * max(total - done, 0)
        return f"[{done}/{total}, ETA {int(eta) // 60}:{int(eta) % 60:02d}]"


ACTIVE: Sweep | None = None  # the sweep this process opened (what an interrupt closes)


def already_done(uri: str, experiment_id: str, job: Job) -> list[int]:
    """With resume=true, the batch sizes of the job's points that the store holds FINISHED already."""
    from experiments import records, tracking

    if not job.cfg["resume"]:
        return []
    keys = {records.point_key(job.cfg, p): p.batch_size for p in job.points}
    return sorted(keys[k] for k in tracking.finished_points(uri, experiment_id, set(keys), job.fingerprint))


def open_sweep(directory: Path, jobs: list[Job] | None, uri: str, experiment: str, parent: str | None = None,
               params: dict[str, str] | None = None) -> SweepState:
    """Open the store (created once, before any job logs), start the sweep's parent run, write the state.

    `parent`: the parent run's name (with its `params`), or None for a single run. Raises StoreUnavailable or
    SweepTaken. Runs that earlier sweeps left RUNNING in this store are closed first (see upload.close_stale).
    """
    from experiments import interrupts, tracking, upload  # mlflow is slow to import: only once the input is good

    global ACTIVE
    with interrupts.deferred():  # a signal here must not leave a parent run without a state file
        exp_id = tracking.open_store(uri, experiment)
        upload.close_stale(uri, exp_id)
        resumed = {str(i): done for i, j in enumerate(jobs or []) if (done := already_done(uri, exp_id, j))}
        if resumed:
            skipped = sum(map(len, resumed.values()))
            log.info("resume: %d of %d points already have a FINISHED run of the same config and environment in "
                     "%s; they are skipped", skipped, sum(len(j.points) for j in jobs), uri)
            jobs = [without(j, resumed.get(str(i), [])) for i, j in enumerate(jobs)]
        n_jobs, points = (len(jobs), sum(len(j.points) for j in jobs)) if jobs is not None else (None, None)
        measurements = sum(len(j.points) * j.cfg["bench"]["processes"] for j in jobs) if jobs is not None else None
        sweep = Sweep(directory)
        state = SweepState(uri, exp_id, None, n_jobs, points, time.time(), measurements, resumed=resumed)
        sweep.start(state)
        ACTIVE = sweep
        if parent is not None:
            run_id = tracking.start_parent(uri, exp_id, parent, {**(params or {}), "job_count": n_jobs,
                                                                  "point_count": points})
            state = replace(state, parent_run_id=run_id)
            sweep.write(state)
    return state

"""The sweep dir on disk, where every result is kept before it is logged: one state file that a sweep's jobs share
(store, experiment, parent run, point count), its lock and progress count, and the points saved under it.

It is the only channel: jobs on other processes or hosts find the parent run there, so the sweep dir must
be on a disk they all see (as Hydra's launchers assume for their own outputs). The launching process holds a
lock file beside it while the sweep runs, so `upload` and later sweeps can tell a live sweep from a dead one.
"""
from __future__ import annotations

import fcntl
import hashlib
import os
import socket
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from experiments.common.job import Job
from experiments.common.protocol import Json
from experiments.measure.machine import MachineCheck
from experiments.store.records import META

STATE, PROGRESS, PEAKS = "nnbench-sweep.json", "nnbench-progress.log", "nnbench-peaks.json"
LOCK = "nnbench-sweep.lock"
MARKER = "mlflow_run_id"  # in a point dir: the id of its run, written as soon as the run is created
POINTS = "points"  # in a job's dir: a dir per point, <job dir>/points/<slug>/, its record.json written last
_held: list[int] = []  # lock file descriptors, open for the life of the process


@dataclass(frozen=True)
class SweepState(Json):
    uri: str  # the MLflow store every job logs to
    experiment_id: str
    parent_run_id: str | None  # None for a single run (no -m)
    jobs: int | None  # None: a sweeper whose jobs can't be listed in advance
    points: int | None
    start: float
    measurements: int | None = None  # points × workers (timed and profiling): what the progress counts
    ended: str | None = None  # how it ended: finished, incomplete, interrupted or stopped; None while it runs
    resumed: dict[str, list[int]] = field(default_factory=dict)  # job number -> batch sizes already in the store
    machine: MachineCheck | None = None  # the machine check the sweep ran before its first job
    # The jobs measured together, paired, by job number (sweep.paired_engine): the first of each group measures them
    # all. With every job's config as logged and its environment's fingerprint, so that it can in any process.
    groups: list[list[int]] = field(default_factory=list)
    overrides: list[str] = field(default_factory=list)  # the command line's, as Hydra parsed them (a cell's repro)
    configs: list[dict] = field(default_factory=list)
    fingerprints: list[str | None] = field(default_factory=list)
    devices: list[str | None] = field(default_factory=list)  # where each job's probe said its workers will run

    def group(self, number: int) -> list[int]:
        """The job numbers measured with job `number` (itself first where it leads them); [number] if unpaired."""
        return next((g for g in self.groups if number in g), [number])

    def compile_cache(self, directory: Path, job: Job) -> Path | None:
        """Where `job`'s workers keep what they compiled (runtime.compile_cache): in the sweep dir, per host and
        environment, so nothing leaks across sweeps, interpreters or nodes (and the path is no part of the
        fingerprint)."""
        if not job.config.runtime.compile_cache:
            return None
        runtime, fw = job.config.runtime, job.config.framework.name
        env = job.fingerprint or hashlib.sha256(f"{job.python}|{fw}|{runtime.allocator}".encode()).hexdigest()
        return directory / "compile-cache" / f"{socket.gethostname()}-{env[:16]}"

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
        return saved(self.directory)

    def tick(self, n: int = 1) -> str:
        """Count `n` finished measurements; '[done/total, ETA]' for the console. Paired cells may take more trials
        than planned (an unsettled ratio, a failed trial measured again): the total then grows with them."""
        with open(self.progress, "a") as f:
            f.write("." * n)
        state, done = self.read(), self.progress.stat().st_size
        total = max(state.measurements or state.points or done, done)
        if not done:  # a point passed on before anything was measured (a variant skipped): no rate yet
            return f"[0/{total}]"
        eta = (time.time() - state.start) / done * max(total - done, 0)
        return f"[{done}/{total}, ETA {int(eta) // 60}:{int(eta) % 60:02d}]"


def job_dir(out: Path, number: int) -> Path:
    """Where a paired group's first job, whose Hydra job dir is `out`, saves job `number`'s points."""
    return out / f"job-{number}"


def point_dir(job: Path, slug: str) -> Path:
    """A point's dir in its job's dir `job`: its record.json, samples, profile and run id marker."""
    return job / POINTS / slug


def saved(directory: Path) -> list[Path]:
    """Every point dir saved under `directory`, at any depth (a record.json is written last, so a half-saved point
    is not one)."""
    return sorted(p.parent for p in directory.glob(f"**/{POINTS}/*/{META}"))

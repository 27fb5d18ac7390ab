"""A job's points, each through its life in one collector (`Points`): each process's result taken as a worker reports
it (the unpaired engine's workers, `sweep.unpaired_engine`, or a paired group's trials, `sweep.paired_engine`), read
and saved in its dir after its last process, profiled by one more worker (profile=true) and saved again with its
profile, then logged, between workers. Parent side."""
from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import signal
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from experiments.common.config import EXTERNAL
from experiments.common.errors import first_line
from experiments.common.job import Job
from experiments.common.protocol import Json, OpResult, Point, PointResult
from experiments.measure.reading import Paired, Reading, Replaced, read
from experiments.stats.outliers import to_replace
from experiments.store import records, sweepdir
from experiments.store.sweepdir import MARKER, PEAKS, Sweep, SweepState
from experiments.sweep import console, requeue, stopping

log = logging.getLogger("nnbench")
NOT_PROFILED = "framework=external runs a runner in another language: nnbench profiles only its own backends"
TIMES = "job.json"


@dataclass(frozen=True)
class JobTimes(Json):
    """Where a job's wall time went (`nnbench overhead` reads it)."""

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

    @classmethod
    def total(cls, jobs: list["JobTimes"]) -> "JobTimes":
        """Several jobs measured in one (a paired group): their numbers added, the one wall time kept."""
        sums = {f.name: sum(getattr(j, f.name) for j in jobs) for f in dataclasses.fields(cls) if f.name != "wall_s"}
        return cls(wall_s=jobs[0].wall_s, **sums)

    @property
    def fixed_s(self) -> float:
        """Worker starts, imports, model builds, plots and logging."""
        return self.wall_s - self.measuring_s - self.profiling_s


@dataclass
class Saved:
    """A point saved in its dir, on its way to be profiled and logged: its reading, its record as saved, and the
    profiling worker's line for it."""

    point: Point
    reading: Reading
    record: records.Record
    directory: Path
    profile: PointResult | None = None


class Points:
    """One job's points through their life, and the console line at each step:

    - measured: each process's result as its worker writes it (`take`), a progress line;
    - saved: after its last process, its reading and record, saved in its dir (a harness fault fails the point);
    - profiled (profile=true, `profiled`): its record saved again with the profile, which never changes a timing;
    - logged: its samples plot and its run, queued until the worker has ended (`log_queued`): logging beside a worker
      took up to a core (its points read `noisy`, 0.8-1.0 other cores, 56 ms for a 0.6 ms call).

    A signal that stopped the worker keeps the point in progress as interrupted and raises once it is saved.
    `state`: the sweep's store and machine check, for the hint (None: nothing is logged, no hint); `sweep`: its dir,
    for the progress count and its calibrated peaks.
    """

    def __init__(self, job: Job, job_dir: Path, state: SweepState | None = None, sweep: Sweep | None = None,
                 in_launcher: bool = False, ticks: bool = True):
        self.job, self.job_dir, self.state, self.sweep = job, job_dir, state, sweep
        self.machine = state.machine if state else None
        self.ticks = ticks  # a finished point counts in the progress (paired: the trials count instead)
        self.in_launcher = in_launcher  # a launcher's process: a job SLURM runs again measures its point then
        self.results: list[list[PointResult]] = [[] for _ in job.points]  # per point, one per process so far
        self.replaced: list[list[Replaced]] = [[] for _ in job.points]  # per point, processes measured again
        self.held: list[int] = []  # points measured by every process, one of them far off: to measure again
        self.again: list[int] = []  # held points still far after this round's worker: for the next one
        self.waiting: list[Saved] = []  # saved, to be profiled
        self.queued: list[Saved] = []  # to be logged once the worker has ended
        self.done: list[Saved] = []  # saved with all they will get, in the order they were passed on
        self.profiling: list[Saved] = []  # being profiled, in the order the profiling worker reports them
        self.paired: dict[int, Paired] = {}  # per point, how it was compared with its cell's baseline (paired)
        self.logging_s, self.spent = 0.0, {}  # where the job's time went (JobTimes' fields)
        self.profiles = job.config.profile and job.config.framework.name != EXTERNAL
        self.changed: dict[int, set[str]] = {}  # per point, its ops judged changed (report.profile_changed): profiled

    @property
    def records(self) -> list[records.Record]:
        return [k.record for k in self.done]

    @property
    def peaks(self) -> Path | None:
        """The sweep's cache of calibrated peaks, MFU's denominator (None: no sweep)."""
        return self.sweep.directory / PEAKS if self.sweep else None

    def take(self, process: int, result: PointResult) -> None:
        """Process `process`'s result for its next point (a worker reports its points in order)."""
        i = next(i for i, got in enumerate(self.results) if len(got) == process)
        point, last = self.job.points[i], process == self.job.config.bench.processes - 1
        self.results[i].append(result)
        if stopping.pending() and result.failure is not None:  # the signal stopped the worker
            return self.interrupted(point, self.results[i] if last else [result])
        if not last:
            return self.measured(point, process, result)
        if self.job.config.bench.remeasure and (far := self.far(i)):
            self.held.append(i)
            log.info("%s: process %d of %d measured; process %s read far off (%s): measured again after the job's "
                     "processes", records.run_name(self.job, point), process + 1, self.job.config.bench.processes,
                     ", ".join(str(j + 1) for j, _ in far), far[0][1])
            return stopping.checkpoint()
        self.measured_all(i, result)

    def measured_all(self, i: int, result: PointResult | None = None) -> None:
        """Point i has all its processes: saved, then profiled or passed on (`result`: its last process's, for the
        progress line while it waits to be profiled)."""
        point = self.job.points[i]
        saved = self.save(point, self.results[i], replaced=tuple(self.replaced[i]))
        if (self.profiles or self.changed.get(i)) and saved.record.outcome == "ok":
            self.waiting.append(saved)  # saved: its timings are final
            if result is not None:
                self.measured(point, len(self.results[i]) - 1, result)
            return
        self.finished(saved)

    def far(self, i: int) -> list[tuple[int, str]]:
        """Point i's processes to measure again (`outliers.to_replace` on each op's process medians, with the cores
        other processes used meanwhile), by index, the farthest op's first; none where a process failed."""
        results = self.results[i]
        if any(r.failure is not None for r in results):
            return []
        out: dict[int, str] = {}
        for op in self.job.points[i].ops:
            rs = [r.ops[op] for r in results if op in r.ops and r.ops[op].status == "ok"]
            if len(rs) == len(results) > 1:
                medians = [float(np.median(o.measurement.samples_s)) for o in rs]
                for j, why in to_replace(medians, [o.background_cores or 0.0 for o in rs]):
                    out.setdefault(j, f"{op}: {why}")
        return list(out.items())

    def retake(self, result: PointResult, last: bool) -> None:
        """One more worker's result for the next held point: it takes the place of the point's first far process,
        which stays in the raw data with its reason. The point waits for the next worker while a process is still
        far and this worker is not the `last` one; else it is saved. A failed result leaves the point as it was."""
        i = self.held.pop(0)
        if result.failure is not None:
            if stopping.pending():  # the signal stopped the worker: the point keeps what it had
                self.held.insert(0, i)
                raise stopping.Signalled(stopping.pending())
            log.info("%s: measuring it again failed (%s); it keeps its processes",
                     records.run_name(self.job, self.job.points[i]), result.failure)
            return self.measured_all(i)
        j, why = self.far(i)[0]
        self.replaced[i].append(Replaced(j + 1, why, self.results[i][j]))
        self.results[i][j] = result
        log.info("%s: process %d of %d measured again, its first reading set aside (%s)",
                 records.run_name(self.job, self.job.points[i]), j + 1, len(self.results[i]), why)
        if not last and self.far(i):
            return self.again.append(i)
        self.measured_all(i)

    def stopped(self, e: stopping.Signalled) -> None:
        """A signal stopped the job between its workers: the saved points keep their timings, unprofiled."""
        for waiting in self.waiting:
            self.unprofiled(waiting, "interrupted", f"interrupted by {e} before it was profiled")
        self.waiting = []

    def release(self, points: list[int]) -> None:
        """Held points saved with the processes they have (the load rule's workers are done or stopped)."""
        for i in points:
            with contextlib.suppress(stopping.Signalled):  # the caller raises once
                self.measured_all(i)

    def held_points(self) -> tuple[Point, ...]:
        """The held points, as the next load-rule worker measures them again."""
        return tuple(self.job.points[i] for i in self.held)

    def next_round(self) -> None:
        """After a load-rule worker: the held points it left saved with the processes they have; those it left still
        far wait for the next one."""
        self.release(self.held)
        self.held, self.again = self.again, []

    def stop_remeasuring(self, e: stopping.Signalled) -> None:
        """A signal stopped a load-rule worker: every held point saved with the processes it has, unprofiled."""
        self.release(self.held + self.again)
        self.held, self.again = [], []
        self.stopped(e)

    def skip_all(self, why: str) -> None:
        """Every point of the job skipped, with the reason (no worker can run its framework), and logged."""
        for r in range(self.job.config.bench.processes):
            for p in self.job.points:
                self.take(r, PointResult(p.batch_size, ops={op: OpResult("skipped", reason=why) for op in p.ops}))
        self.log_queued()

    def failed(self, process: int, reason: str) -> None:
        """A harness fault (its traceback, `reason`) stopped process `process`: the points it had left fail."""
        for p in [p for p, got in zip(self.job.points, self.results) if len(got) == process]:
            self.take(process, PointResult(p.batch_size, failure="harness error", stderr_tail=reason))

    def measured(self, point: Point, process: int, result: PointResult) -> None:
        what = f"FAILED: {result.failure}" if result.failure else "measured"
        n = self.job.config.bench.processes
        log.info("%s %s: process %d of %d %s", self.tick(), records.run_name(self.job, point), process + 1, n, what)
        stopping.checkpoint()  # a point's record comes after its last process

    def save(self, point: Point, results: list[PointResult], interrupted: str | None = None,
             replaced: tuple[Replaced, ...] = ()) -> Saved:
        """The point's reading and record, saved in its dir."""
        try:
            reading = read(point, results, self.machine, replaced, self.peaks, records.run_name(self.job, point))
        except Exception:  # a harness bug fails this point, not the sweep
            failed = PointResult(point.batch_size, failure="harness error", stderr_tail=traceback.format_exc())
            reading = read(point, [failed])
        reading = dataclasses.replace(reading, interrupted=interrupted,
                                      paired=self.paired.get(self.job.points.index(point)))
        rec = records.build(self.job, reading)
        if self.job.config.profile and not self.profiles:
            rec = records.without_profile(rec, "unavailable", NOT_PROFILED)
        saved = Saved(point, reading, rec, sweepdir.point_dir(self.job_dir, rec.slug))
        rec.save(saved.directory)
        return saved

    def interrupted(self, point: Point, results: list[PointResult]) -> None:
        """The point the worker was measuring when the signal came: kept as interrupted (MLflow status KILLED)."""
        signum = stopping.pending()
        if self.in_launcher and requeue.runs_again(signum):  # left to the job's next run, not recorded
            log.info("%s: left to the job's next run", records.run_name(self.job, point))  # no tick: not measured
            raise stopping.Signalled(signum)
        why = f"interrupted by {signal.Signals(signum).name} while this point was measuring"
        saved = self.save(point, results, why)
        log.info("%s %s: INTERRUPTED (%s)", self.tick(), saved.record.run_name, saved.reading.interrupted)
        self.queued.append(saved)
        raise stopping.Signalled(signum)

    def cut(self, i: int, why: str) -> None:
        """Point i as its processes so far measured it, saved as interrupted (KILLED) and queued to be logged."""
        saved = self.save(self.job.points[i], self.results[i], why)
        log.info("%s %s: INTERRUPTED (%s)", self.tick(0), saved.record.run_name, why)
        self.queued.append(saved)

    def finished(self, saved: Saved, ticks: int | None = None) -> None:
        """Its console line, `ticks` measurements on (default: one where a finished point counts); then it waits to
        be logged."""
        log.info("%s %s: %s", self.tick(int(self.ticks) if ticks is None else ticks), saved.record.run_name,
                 console.point_line(saved.reading, saved.record.tags, saved.profile))
        self.done.append(saved)
        self.queued.append(saved)
        stopping.checkpoint()

    def unprofiled(self, saved: Saved, status: str, why: str) -> None:
        """A point that keeps its timings without a profile (failed or interrupted); saved and passed on."""
        saved.record = records.without_profile(saved.record, status, why)
        saved.record.save(saved.directory)
        with contextlib.suppress(stopping.Signalled):  # the caller raises once
            self.finished(saved)

    def to_profile(self) -> tuple[Point, ...]:
        """The saved points handed to the profiling worker, each with the ops it measured."""
        self.profiling, self.waiting = self.waiting, []
        return tuple(Point(k.point.batch_size, self.profiled_ops(k)) for k in self.profiling)

    def profiled_ops(self, saved: Saved) -> tuple[str, ...]:
        """profile=true: every op the point measured; else (report.profile_changed) those judged changed."""
        changed = self.changed.get(self.job.points.index(saved.point), set())
        return tuple(op for op in saved.reading.ops if self.profiles or op in changed)

    def profiling_failed(self, reason: str) -> None:
        """A harness fault (its traceback, `reason`) stopped the profiling worker: the points it had left keep their
        timings, their profile failed."""
        for k in list(self.profiling):
            self.profiled(PointResult(k.point.batch_size, failure="harness error", stderr_tail=reason))

    def profiled(self, result: PointResult) -> None:
        """The profiling worker's line for its next point: the point's record again, with the profile; after a signal
        stopped it, this point and the rest keep their timings, unprofiled."""
        saved = self.profiling.pop(0)
        if result.failure is not None and (signum := stopping.pending()):
            for rest in [saved, *self.profiling]:
                self.unprofiled(rest, "interrupted", f"interrupted by {signal.Signals(signum).name} before it was "
                                "profiled")
            self.profiling = []
            raise stopping.Signalled(signum)
        files = self.job_dir / "process-profile" / "files" / f"bs{saved.point.batch_size}"
        try:
            saved.record = records.add_profile(saved.record, saved.reading, result, files, saved.directory)
            saved.profile = result if result.failure is None else None
        except Exception:  # a harness bug fails this profile, not the point
            saved.record = records.without_profile(saved.record, "failed", f"harness error\n{traceback.format_exc()}")
        saved.record.save(saved.directory)
        self.finished(saved, int(self.profiles))  # profile=true's measurement, paired too (`measurements` counts it)

    def log_queued(self) -> None:
        """Log what the last worker finished (the samples plot, then the run), now that no worker measures."""
        t = time.perf_counter()
        while self.queued:
            saved = self.queued.pop(0)
            if self.state is not None:
                log_point(self.state, saved.record, saved.directory)
        self.logging_s += time.perf_counter() - t

    def tick(self, n: int = 1) -> str:
        """The progress count, `n` measurements on (a full disk must not stop the logging of what is measured)."""
        try:
            return self.sweep.tick(n) if self.sweep else ""
        except OSError:
            return "[?]"

    def workers_spent(self) -> dict[str, float]:
        """Where the workers' time went (JobTimes' fields), over every process of every point."""
        ms = [o.measurement for per_point in self.results for r in per_point for o in r.ops.values() if o.measurement]
        return {"op_points": len(ms), "startup_s": sum(r.startup_s or 0 for p in self.results for r in p),
                "first_calls_s": sum(m.first_call_s for m in ms if not math.isnan(m.first_call_s)),  # NaN: a runner's
                "warmup_s": sum(m.warmup_s for m in ms), "sampling_s": sum(m.sampling_s for m in ms)}

    def times(self, wall_s: float) -> JobTimes:
        ops = [o for k in self.done for o in k.reading.ops.values()]
        profiled = [r.profile for k in self.done if k.profile for r in k.profile.ops.values() if r.profile]
        return JobTimes(wall_s, sum(m.elapsed_s for o in ops for m in o.measurements), len(self.done),
                        profiling_s=sum(p.elapsed_s for p in profiled), logging_s=self.logging_s, **self.spent)


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
        tracking.Store(state.uri).log_record(state.experiment_id, rec, directory, state.parent_run_id,
                                             on_created=(directory / MARKER).write_text)
    except Exception as e:  # the record is on disk already; the sweep goes on
        log.error("could not log %s to %s (%s); it is kept in %s: log it later with `nnbench upload %s`",
                  rec.run_name, state.uri, first_line(e), directory, directory)

"""Paired comparisons: the variants of a cell measured by warm workers that take turns in short bursts, the idle
ones stopped, in fresh trials. Parent side.

A *side* is one variant (a framework set-up, an environment); a *cell* is one point's op (batch size and op); a
*trial* is one fresh worker per side that goes through the cells one after another: for each cell, every worker
prepares it (built, compiled, warmed up, one at a time), then `Design.rounds` rounds of one burst per side, only one
worker running at a time. The next cell frees the previous one's model.

Why: a process's speed drifts in plateaus of about a second on a shared machine, and each process settles at a level
of its own, so sides measured one after another differ by more than the changes worth finding. Interleaving
bursts well inside a plateau makes every side see the same machine; fresh trials make each process's own bias part
of the evidence. An idle worker must take no CPU: its OpenMP threads spin-wait after each op (libgomp's active
wait) and take the cores the running worker's threads need (interleaved bursts spread 65% between A/A pairs with
both running, 3.2% with the idle one stopped, torch LeNet bs32 inference on 2 cores). So it is stopped (SIGSTOP,
which holds every thread, and its children too) and continued for its turn (SIGCONT), which leaves every measured
setting (threads, wait policy) alone. The fork servers wait in waitpid and the parent in a read: neither spins,
and the parent computes nothing while a worker bursts.

The unit of evidence is one trial: log(side/base), the median of its rounds' log ratios (`stats.pair_log_ratio`).
The caller judges the cells from their trials (`settled`); a cell it leaves unsettled gets more trials, up to
`Design.max_trials`. Each trial's cell is saved to disk as it ends (`<cell>/trial-<n>.json`), every burst kept.
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import select
import shutil
import signal
import socket
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import psutil

from experiments.common.job import Job
from experiments.common.protocol import Burst, Command, Json, Point, Prepared, Ready, Request
from experiments.harness import manager
from experiments.measure import stats
from experiments.measure.meter import meter, oversubscription

# Burst length, chosen with `python -m experiments.selfcheck.paired` (docs/evidence.md): A/A pairs of torch LeNet
# bs32 inference (one thread), 1.5 s of bursts per side per pair, other work using 1.3-1.5 of the 2 cores: the
# pairs' log ratios spread 3.4% (SD, 46 pairs) with 20 ms bursts, 4.8% (44) with 50 ms, 5.3% (28) with 100 ms and
# 5.2% (28) with 200 ms; a pair took 5.5 s against 4.2-4.5 s (each burst's stop and continue), still the most
# precision per second. Other programs' load comes and goes faster than 50 ms: a round's bursts share more of it.
BURST_S = 0.02
ROUNDS = 75  # bursts per side per trial and cell: 1.5 s of each side's samples
TRIALS = 6  # fresh trials per cell, at first
MAX_TRIALS = 12  # an unsettled cell gets more trials, up to this many
ORDERS = ("abba", "random")  # the sides' order within each round: rotating (AB, BA, AB, ...) or drawn at random
TRIAL = "trial-{}.json"  # each trial's cell, every burst's samples, in the cell's directory


@dataclass(frozen=True)
class Design(Json):
    """How the cells are compared: bursts, rounds, trials, order."""

    burst_s: float = BURST_S
    rounds: int = ROUNDS
    trials: int = TRIALS
    max_trials: int = MAX_TRIALS
    order: str = "abba"
    seed: int = 0  # of the random order

    def __post_init__(self):
        if self.order not in ORDERS:
            raise ValueError(f"order {self.order!r}: one of {', '.join(ORDERS)}")
        if self.burst_s <= 0 or self.rounds < 1 or self.trials < 1 or self.max_trials < self.trials:
            raise ValueError(f"{self}: bursts and rounds must be positive, and max_trials at least trials")


@dataclass(frozen=True)
class Side:
    """One side of a comparison: what its workers run (framework, set-up, model, budget) and where (the interpreter,
    the allocator's and compile cache's environment, fork or spawn), as a job's workers would."""

    label: str  # for people: `framework=jax`, an environment's spec
    request: Request
    python: str
    environ: dict[str, str]
    start: str  # fork (from this side's fork server) or spawn
    timeout_s: float  # for each answer: the worker's start, an op's preparation, a burst

    @classmethod
    def of(cls, job: Job, label: str, cache: Path | None = None, peaks: Path | None = None) -> "Side":
        """A checked job's side; `cache`: its compile cache (a later trial's workers load what the first compiled);
        `peaks`: the sweep's cache of calibrated peaks."""
        c = job.config
        return cls(label, job.request(peaks), job.python, manager.environ(str(c.runtime.allocator), cache),
                   str(c.runtime.start), c.bench.timeout_s)


@dataclass(frozen=True)
class Cell(Json):
    """One point's op: what the sides take turns on."""

    batch_size: int
    op: str

    @property
    def name(self) -> str:
        return f"bs{self.batch_size}-{self.op}"


def cells_of(points: tuple[Point, ...] | list[Point]) -> list[Cell]:
    """The cells of the points, in their order (a point's ops one after another)."""
    return [Cell(p.batch_size, op) for p in points for op in p.ops]


@dataclass
class Turn(Json):
    """One side's worker in one trial on one cell: the worker, the op as it prepared it, every burst it timed."""

    ready: Ready | None = None
    prepared: Prepared | None = None
    bursts: list[Burst] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.prepared is not None and self.prepared.status == "ok" and bool(self.bursts)

    @property
    def skipped(self) -> str | None:
        """Why the op can't run on this side (its worker said so when it prepared it); None: it can."""
        p = self.prepared
        return p.reason if p is not None and p.status != "ok" else None

    def oversubscribed(self, framework: str, other_cores: float) -> str | None:
        """Where this side's intra-op threads outnumbered the cores other processes left free: why, what to set."""
        r = self.ready
        if r is None or not r.cores or not self.bursts:
            return None
        return oversubscription(framework, r.threads, r.cores, other_cores,
                                int(r.machine.get("cpu_count_logical", r.cores)))


@dataclass
class Trial(Json):
    """One fresh worker per side on one cell: each side's turn, and the order the bursts ran in."""

    index: int
    turns: list[Turn]
    order: str = ""  # the sides' letters in the order their bursts ran: ABBAAB...
    wall_s: float = 0.0  # the cell's time in this trial: preparations, bursts, stops
    failure: str | None = None  # a crash, a hang, a worker that never connected: the trial's cell is left out
    failed_side: int | None = None  # whose worker it was
    stderr_tail: str = ""
    meter: dict[str, float] = field(default_factory=dict)  # the parent's `meter()` change over the rounds

    def background_cores(self) -> float:
        """Other processes' CPU use over the cell's rounds, in cores: the machine's busy time less this trial's
        workers' (each one's whole CPU time: its bursts, and answering the parent between them) and the parent's own,
        which drives them between bursts. Read once over the rounds, not per burst: the kernel counts idle time in
        10 ms ticks, ±0.5 core per 20 ms burst."""
        m = self.meter
        if not m or m["wall_s"] <= 0:
            return 0.0
        return max(0.0, (m["busy_cpu_s"] - m["own_cpu_s"] - m["workers_cpu_s"]) / m["wall_s"])

    def log_ratio(self, side: int, base: int) -> float | None:
        """log(side/base): the median of the rounds' log ratios; None where either side has no bursts."""
        if self.failure is not None or not (self.turns[base].ok and self.turns[side].ok):
            return None
        a, b = self.turns[base], self.turns[side]
        return stats.pair_log_ratio([x.samples_s for x in a.bursts], [x.samples_s for x in b.bursts])


@dataclass
class Compared(Json):
    """One cell over its trials (every burst's samples kept)."""

    cell: Cell
    trials: list[Trial] = field(default_factory=list)

    def log_ratios(self, side: int, base: int) -> list[float]:
        return [r for t in self.trials if (r := t.log_ratio(side, base)) is not None]

    def skipped(self, side: int) -> str | None:
        """Why the op can't run on `side`, if its worker said so."""
        return next((why for t in self.trials if t.turns and (why := t.turns[side].skipped)), None)

    def failed(self) -> set[int | None]:
        """The sides whose worker failed on this cell (a crash, an OOM kill, a timeout); None: a side unknown."""
        return {t.failed_side for t in self.trials if t.failure is not None}

    def done(self, sides: int) -> bool:
        """Whether no side is left to measure it: every side's worker failed on it."""
        failed = self.failed()
        return None in failed or len(failed) >= sides

    def measured(self) -> int:
        """Its trials that no worker failed in: a failed trial measured nothing for the sides left."""
        return sum(t.failure is None for t in self.trials)


def letter(i: int) -> str:
    return chr(ord("A") + i)


class PairFailed(Exception):
    """A paired worker crashed, hung or never connected: the message says which and why; `side` is its side."""

    def __init__(self, message: str, side: int | None = None):
        super().__init__(message)
        self.side = side


def stopped(pid: int) -> bool:
    """Whether every thread of the process is stopped (Linux /proc: state T); a process that is gone counts."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return True
    for tid in tasks:
        try:
            state = Path(f"/proc/{pid}/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            continue
        if state not in ("T", "t", "Z", "X"):
            return False
    return True


class PairedWorker:
    """One side's worker in a trial: started with a paired request (forked by the side's server, else spawned), its
    socket, its commands, its stops and continues."""

    def __init__(self, side: Side, server: manager.ForkServer | None, directory: Path, index: int):
        self.side, self.index, self.name = side, index, letter(index)
        self.log = directory / f"{self.name}.log"
        self.home = tempfile.mkdtemp(prefix="nnbench-pair-")  # private (0700), and short: a socket path is <108 bytes
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(os.path.join(self.home, "s"))
        self.listener.listen(1)
        self.conn: socket.socket | None = None
        self.buffer, self.family, self.rc = b"", [], None
        request = dataclasses.replace(side.request, paired=self.listener.getsockname())
        path, results = directory / f"{self.name}-request.json", directory / f"{self.name}-results.jsonl"
        path.write_text(request.to_json())
        worker = None
        with contextlib.suppress(manager.ServerUnavailable):
            worker = server.start(path, results, self.log) if server else None
        self.worker = worker or manager.Spawned(side.python, side.environ, path, results, self.log)

    def failed(self, why: str) -> PairFailed:
        return PairFailed(why, self.index)

    def ready(self) -> Ready:
        """Wait for the worker to connect and say it is ready."""
        deadline = time.monotonic() + self.side.timeout_s
        while not select.select([self.listener], [], [], 0.5)[0]:
            if self.wait(0) is not None:
                raise self.failed(f"{manager.exit_reason(self.rc, f'worker {self.name}')} before it connected")
            if time.monotonic() > deadline:
                raise self.failed(f"worker {self.name} did not connect within {self.side.timeout_s:g} s")
        self.conn, _ = self.listener.accept()
        pid = self.conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12)  # struct ucred: pid, uid, gid
        if int.from_bytes(pid[:4], "little") != self.worker.pid:
            raise self.failed(f"another process connected to worker {self.name}'s socket")
        return Ready.from_json(self.read(self.side.timeout_s))

    def read(self, timeout: float) -> str:
        """The worker's next line; PairFailed once it is gone or silent for `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.conn], [], [], left)[0]:
                raise self.failed(f"worker {self.name} gave no answer within {timeout:g} s")
            try:
                data = self.conn.recv(1 << 20)
            except OSError:  # reset by a worker that died
                data = b""
            if not data:
                rc = self.wait(5)
                raise self.failed(manager.exit_reason(rc, f"worker {self.name}") if rc is not None else
                                  f"worker {self.name} hung up")
            self.buffer += data
        line, self.buffer = self.buffer.split(b"\n", 1)
        return line.decode()

    def ask(self, command: Command, timeout: float) -> str:
        with contextlib.suppress(OSError):  # a worker that died: its reason comes from the read
            self.conn.sendall(command.to_json().encode() + b"\n")
        return self.read(timeout)

    def prepare(self, cell: Cell) -> Prepared:
        return Prepared.from_json(self.ask(Command("prepare", batch_size=cell.batch_size, op=cell.op),
                                           self.side.timeout_s))

    def burst(self, seconds: float) -> Burst:
        return Burst.from_json(self.ask(Command("burst", seconds), self.side.timeout_s + 100 * seconds))

    def stop(self) -> None:
        """Stop the worker and whatever it started, and wait until every thread of each has stopped. Its children
        are read at its first stop, once ready: a step that is compiled starts no process of its own. psutil checks
        each process's identity before it signals it, so a pid that was reused is never stopped."""
        if not self.family:
            with contextlib.suppress(psutil.Error):
                worker = psutil.Process(self.worker.pid)
                self.family = [worker, *worker.children(recursive=True)]
        for p in self.family:
            with contextlib.suppress(psutil.Error):
                p.send_signal(signal.SIGSTOP)
        deadline = time.monotonic() + 5
        while not all(stopped(p.pid) for p in self.family if p.is_running()):
            if time.monotonic() > deadline:
                raise self.failed(f"worker {self.name} did not stop")
            time.sleep(0.0005)

    def cpu_s(self) -> float:
        """The worker's CPU time so far, every thread (0 once it is gone)."""
        try:
            t = psutil.Process(self.worker.pid).cpu_times()
        except psutil.Error:
            return 0.0
        return t.user + t.system

    def cont(self) -> None:
        for p in reversed(self.family):
            with contextlib.suppress(psutil.Error):
                p.send_signal(signal.SIGCONT)

    def wait(self, timeout: float) -> int | None:
        """Its exit code, once it has ended (within `timeout` seconds); else None."""
        if self.rc is None:
            self.rc = self.worker.wait(timeout)
        return self.rc

    def end(self) -> None:
        """Tell the worker to end, and wait for it; kill it (and what it started) if it doesn't."""
        if self.wait(0) is not None:
            return
        self.cont()
        with contextlib.suppress(OSError, AttributeError):
            self.conn.sendall(Command("end").to_json().encode() + b"\n")
        if self.wait(30) is None:
            self.kill()

    def kill(self) -> None:
        """Kill the worker and what it started (a stopped process dies of SIGKILL all the same), and reap it."""
        if self.wait(0) is None:
            self.worker.kill()
            self.rc = -signal.SIGKILL

    def close(self) -> None:
        for s in (self.conn, self.listener):
            if s is not None:
                s.close()
        shutil.rmtree(self.home, ignore_errors=True)


def orders(design: Design, index: int, sides: list[int], rng: np.random.Generator) -> list[list[int]]:
    """The sides' order in each round of trial `index`: rotating (AB, BA, AB, ... for two sides; each side first in
    turn, starting one further in each trial), or drawn at random."""
    if design.order == "random":
        return [list(rng.permutation(sides)) for _ in range(design.rounds)]
    k = len(sides)
    return [sides[(r + index) % k:] + sides[:(r + index) % k] for r in range(design.rounds)]


class Workers:
    """One trial's workers, one per side, started together; every one killed and closed on the way out."""

    def __init__(self, sides: list[Side], servers: list, directory: Path):
        self.sides, self.servers, self.directory = sides, servers, directory
        self.live: list[PairedWorker] = []
        self.ready: list[Ready] = []

    def start(self) -> "Workers":
        """Start every side's worker; once each is ready, stop it. PairFailed (every one killed) where one can't."""
        self.directory.mkdir(parents=True, exist_ok=True)
        try:
            for i, (s, server) in enumerate(zip(self.sides, self.servers)):
                self.live.append(PairedWorker(s, server, self.directory, i))
            for w in self.live:  # they start at once; none measures until every one is ready and stopped
                self.ready.append(w.ready())
                if len(self.sides) > 1:  # one side alone has no one to take turns with
                    w.stop()
        except BaseException:
            self.__exit__(PairFailed, None, None)
            raise
        return self

    def __enter__(self) -> "Workers":
        return self

    def __exit__(self, *exc) -> None:
        for w in self.live:
            if exc[0] is None:
                with contextlib.suppress(PairFailed):
                    w.end()
            w.kill()
            w.close()


def run_cell(workers: Workers, cell: Cell, design: Design, index: int, rng: np.random.Generator,
             skip: set[int | None] = frozenset()) -> Trial:
    """One cell in a trial: each worker prepares it while the others are stopped (the first side first in even
    trials, the last in odd ones), then `design.rounds` rounds of one burst per side, one worker running at a time.
    The sides in `skip` (their worker failed on this cell before) sit it out. PairFailed for a worker that crashed,
    hung or would not stop."""
    t0, live, turns = time.perf_counter(), workers.live, len(workers.live) > 1  # one side alone is never stopped
    trial = Trial(index, [Turn(ready=r) for r in workers.ready])
    for i in (range(len(live)) if index % 2 == 0 else reversed(range(len(live)))):
        if i in skip:
            continue
        live[i].cont() if turns else None
        trial.turns[i].prepared = live[i].prepare(cell)
        live[i].stop() if turns else None
    ok = [i for i, t in enumerate(trial.turns) if t.prepared is not None and t.prepared.status == "ok"]
    before, cpu = meter(), sum(w.cpu_s() for w in live)
    for seq in orders(design, index, ok, rng) if ok else ():
        for i in seq:
            live[i].cont() if turns else None
            trial.turns[i].bursts.append(live[i].burst(design.burst_s))
            live[i].stop() if turns else None
            trial.order += letter(i)
    after = meter()
    trial.meter = {k: after[k] - before[k] for k in after} | {"workers_cpu_s": sum(w.cpu_s() for w in live) - cpu}
    trial.wall_s = time.perf_counter() - t0
    return trial


def server(side: Side, log: Path) -> manager.ForkServer | None:
    """The side's fork server (start=fork), or None: its workers are spawned (also where it can't start)."""
    if side.start != "fork" or side.request.framework == "external":
        return None
    log.parent.mkdir(parents=True, exist_ok=True)
    try:
        return manager.ForkServer(side.python, side.request.framework, side.environ, log)
    except manager.ServerUnavailable:
        return None


Settled = Callable[[list[Compared]], list[bool]]  # the cells judged together: which need no more trials


class Session:
    """The sides compared on the cells: `design.trials` fresh trials over every cell, then more trials over the cells
    the caller's judge leaves unsettled, up to `design.max_trials`. `compared` holds every trial so far, also after
    an interrupt, which the caller handles. A side whose worker failed on a cell (a crash, an OOM kill, a timeout)
    sits that cell out from then on; the trial goes on with fresh workers for its other cells. `checkpoint` is
    called after each cell and before a fault is recorded: it raises where the caller must stop (a signal)."""

    def __init__(self, sides: list[Side], cells: list[Cell], design: Design, directory: Path,
                 on_trial: Callable[[Compared, Trial], None] = lambda c, t: None,
                 checkpoint: Callable[[], None] = lambda: None):
        self.sides, self.design, self.directory, self.on_trial = sides, design, directory, on_trial
        self.checkpoint = checkpoint
        self.compared = [Compared(c) for c in cells]
        self.rng = np.random.default_rng(design.seed)
        self.trials = 0

    def run(self, settled: Settled = lambda cs: [True] * len(cs)) -> list[Compared]:
        with ThreadPoolExecutor(len(self.sides)) as pool:  # the servers import their frameworks at once
            servers = list(pool.map(server, self.sides, (self.directory / f"server-{letter(i)}.log"
                                                         for i in range(len(self.sides)))))
        try:
            for _ in range(self.design.trials):
                self.trial(list(range(len(self.compared))), servers)
            while more := self.unsettled(settled):
                self.trial(more, servers)
            return self.compared
        finally:
            for s in servers:
                if s is not None:
                    s.close()

    def unsettled(self, settled: Settled) -> list[int]:
        """The cells that get one more trial, while a side is left to measure them: unsettled ones, up to max_trials
        trials that measured them; and those that failed trials left unmeasured (the failed side sits them out, so
        the sides left measure them: else one failure in a sweep of one trial would leave them nothing)."""
        return [i for i, (c, ok) in enumerate(zip(self.compared, settled(self.compared)))
                if not c.done(len(self.sides)) and c.measured() < (1 if ok else self.design.max_trials)]

    def trial(self, which: list[int], servers: list) -> None:
        """One fresh trial over the cells `which` that a side is left to measure, in order (reversed in odd trials,
        so no cell always comes first in a process's life); fresh workers again after a fault."""
        index, self.trials = self.trials, self.trials + 1
        todo = [i for i in which if not self.compared[i].done(len(self.sides))][::1 if index % 2 == 0 else -1]
        while todo:
            try:
                workers = Workers(self.sides, servers, self.directory / f"trial-{index}").start()
            except PairFailed as e:  # a worker that can't start fails every cell it would measure
                self.checkpoint()
                for i in todo:
                    self.keep(i, Trial(index, [], failure=str(e), failed_side=e.side, stderr_tail=self.tails(index)))
                return
            with workers:
                while todo:
                    trial = self.cell(workers, todo.pop(0), index)
                    if trial.failure is not None:
                        break  # its workers are spent: fresh ones for the rest

    def cell(self, workers: Workers, i: int, index: int) -> Trial:
        c = self.compared[i]
        try:
            trial = run_cell(workers, c.cell, self.design, index, self.rng, c.failed())
        except PairFailed as e:
            self.checkpoint()  # a signal killed the workers: not a fault of this cell
            if e.side is not None:  # hung, or would not stop: killed, not asked to end (30 s more of waiting)
                workers.live[e.side].kill()
            trial = Trial(index, [Turn(ready=r) for r in workers.ready], failure=str(e), failed_side=e.side,
                          stderr_tail=self.tails(index))
        self.keep(i, trial)
        self.checkpoint()
        return trial

    def keep(self, i: int, trial: Trial) -> Trial:
        """The trial's cell saved in the cell's directory and added to it; the caller hears of it."""
        c = self.compared[i]
        where = self.directory / c.cell.name
        where.mkdir(parents=True, exist_ok=True)
        (where / TRIAL.format(trial.index)).write_text(trial.to_json())
        c.trials.append(trial)
        self.on_trial(c, trial)
        return trial

    def tails(self, index: int) -> str:
        """The last lines of trial `index`'s worker logs."""
        logs = sorted((self.directory / f"trial-{index}").glob("*.log"))
        return "\n".join(f"--- worker {p.stem}\n{p.read_text(errors='replace')[-1500:]}" for p in logs)


def run_pair(a: Side, b: Side, cell: Cell, design: Design, index: int, servers: list, directory: Path,
             rng: np.random.Generator) -> Trial:
    """One trial of A and B on one cell, with fresh workers (the burst-length self-check's unit)."""
    try:
        with Workers([a, b], servers, directory).start() as workers:
            return run_cell(workers, cell, design, index, rng)
    except PairFailed as e:
        return Trial(index, [], failure=str(e), failed_side=e.side)


@dataclass
class Judged:
    """A cell of a two-sided comparison (B against A) and its verdict."""

    compared: Compared
    verdict: Any  # the judge's

    @property
    def log_ratios(self) -> list[float]:
        return self.compared.log_ratios(1, 0)


def compare(a: Side, b: Side, design: Design, judge: Callable[[list[list[float]]], list], directory: Path,
            on_trial: Callable[[Compared, Trial], None] = lambda c, t: None) -> list[Judged]:
    """B against A on the cells of A's points, paired, each cell judged by `judge` (its verdicts must say whether
    they are `conclusive`): more trials for a cell while it is not, up to `design.max_trials`."""
    session = Session([a, b], cells_of(a.request.points), design, directory, on_trial)
    settled = lambda cs: [v.conclusive for v in judge([c.log_ratios(1, 0) for c in cs])]  # noqa: E731
    compared = session.run(settled)
    return [Judged(c, v) for c, v in zip(compared, judge([c.log_ratios(1, 0) for c in compared]))]

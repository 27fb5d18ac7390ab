"""Paired comparisons: two warm workers, A and B, each in its own environment, prepare the same point's op; the
parent alternates short bursts between them for a number of rounds, the idle one stopped, in fresh pairs per point.
Parent side.

Why: a process's speed drifts in plateaus of about a second on a shared machine, and each process settles at a level
of its own, so sequential measurements of A and B differ by more than the changes worth finding. Interleaving
bursts well inside a plateau makes both sides see the same machine; fresh pairs make each process's own bias part
of the evidence. The idle worker must take no CPU: its OpenMP threads spin-wait after each op (libgomp's active
wait) and take the cores the running worker's threads need (interleaved bursts spread 65% between A/A pairs with
both running, 3.2% with the idle one stopped, torch LeNet bs32 inference on 2 cores). So it is stopped (SIGSTOP,
which holds every thread, and its children too) and continued for its turn (SIGCONT), which leaves every measured
setting (threads, wait policy) alone. The fork servers wait in waitpid and the parent in a read: neither spins.

The unit of evidence is one pair: log(B/A), the median of its rounds' log ratios (`stats.pair_log_ratio`).
The judge (report/verdict.py's `judge_pairs`, handed in by the caller) turns each point's pair ratios into a
verdict; a point it leaves inconclusive gets more pairs, up to `Design.max_pairs`.
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
from typing import Any, Callable, Protocol, Sequence

import numpy as np
import psutil

from experiments.common.job import Job
from experiments.common.protocol import Burst, Command, Json, Point, Prepared, Request
from experiments.harness import manager
from experiments.measure import stats
from experiments.measure.meter import background_cores, oversubscription

# Burst length, chosen with `python -m experiments.selfcheck.paired` (docs/comparing.md): A/A pairs of torch LeNet
# bs32 inference (one thread), 1.5 s of bursts per side per pair, other work using 1.3-1.5 of the 2 cores: the
# pairs' log ratios spread 3.4% (SD, 46 pairs) with 20 ms bursts, 4.8% (44) with 50 ms, 5.3% (28) with 100 ms and
# 5.2% (28) with 200 ms; a pair took 5.5 s against 4.2-4.5 s (each burst's stop and continue), still the most
# precision per second. Other programs' load comes and goes faster than 50 ms: a round's two bursts share more of it.
BURST_S = 0.02
ROUNDS = 75  # bursts per side per pair: 1.5 s of each side's samples
PAIRS = 6  # fresh pairs per point, at first
MAX_PAIRS = 12  # an inconclusive point gets more pairs, up to this many
ORDERS = ("abba", "random")  # the sides' order within each round: alternating (AB, BA, AB, ...) or drawn at random
SIDES = ("A", "B")
PAIR = "pair.json"  # each pair's result, every burst's samples, in its directory


@dataclass(frozen=True)
class Design(Json):
    """How a point is compared: bursts, rounds, pairs, order."""

    burst_s: float = BURST_S
    rounds: int = ROUNDS
    pairs: int = PAIRS
    max_pairs: int = MAX_PAIRS
    order: str = "abba"
    seed: int = 0  # of the random order

    def __post_init__(self):
        if self.order not in ORDERS:
            raise ValueError(f"order {self.order!r}: one of {', '.join(ORDERS)}")
        if self.burst_s <= 0 or self.rounds < 1 or self.pairs < 1 or self.max_pairs < self.pairs:
            raise ValueError(f"{self}: bursts and rounds must be positive, and max_pairs at least pairs")


@dataclass(frozen=True)
class Side:
    """One side of a comparison: what its workers run (framework, set-up, model, budget, points) and where (the
    interpreter, the allocator's and compile cache's environment, fork or spawn), as a job's workers would."""

    label: str  # what differs, for people: `framework.compile=true`, an environment's spec
    request: Request
    python: str
    environ: dict[str, str]
    start: str  # fork (from this side's fork server) or spawn
    timeout_s: float  # for each answer: the worker's start and preparation, a burst

    @classmethod
    def of(cls, job: Job, label: str, cache: Path | None = None) -> "Side":
        """A checked job's side; `cache`: its compile cache (a pair's later workers load what the first compiled)."""
        c = job.config
        return cls(label, job.request(), job.python, manager.environ(str(c.runtime.allocator), cache),
                   str(c.runtime.start), c.bench.timeout_s)


@dataclass
class PairResult(Json):
    """One fresh pair of workers on one point's op: each side's preparation and every burst it timed."""

    index: int
    order: str = ""  # the sides in the order their bursts ran: ABBAAB...
    a: Prepared | None = None
    b: Prepared | None = None
    a_bursts: list[Burst] = field(default_factory=list)
    b_bursts: list[Burst] = field(default_factory=list)
    wall_s: float = 0.0  # the pair's whole time: starts, preparations, bursts, stops
    failure: str | None = None  # a crash, a hang, a worker that never connected: the pair is left out
    stderr_tail: str = ""

    @property
    def ok(self) -> bool:
        return self.failure is None and bool(self.a_bursts) and bool(self.b_bursts)

    @property
    def log_ratio(self) -> float | None:
        """log(B/A): the median of the rounds' log ratios; None for a failed pair."""
        if not self.ok:
            return None
        return stats.pair_log_ratio([x.samples_s for x in self.a_bursts], [x.samples_s for x in self.b_bursts])

    def busy_cores(self, side: str) -> float:
        """Other processes' CPU use while this side's bursts ran, in cores: over all its bursts together (a single
        burst's reading is too coarse, see `background_cores`)."""
        bursts = self.a_bursts if side == "A" else self.b_bursts
        return background_cores({k: sum(x.meter[k] for x in bursts) for k in ("busy_cpu_s", "own_cpu_s", "wall_s")}
                                ) if bursts else 0.0

    def oversubscribed(self, side: str, framework: str) -> str | None:
        """Where this side's intra-op threads outnumbered the cores free during its bursts: why, and what to set."""
        p = self.a if side == "A" else self.b
        if p is None or not p.cores:
            return None
        machine = int(p.machine.get("cpu_count_logical", p.cores))
        return oversubscription(framework, p.threads, p.cores, self.busy_cores(side), machine)


class Judgment(Protocol):
    """What a judge says of one point: whether more pairs could change it."""

    @property
    def conclusive(self) -> bool: ...


Judge = Callable[[list[list[float]]], Sequence[Judgment]]  # each point's pair log ratios -> its judgment


@dataclass
class Compared(Json):
    """One point's op compared: every pair (every burst's samples kept) and its judgment, made with the points
    judged together."""

    batch_size: int
    op: str
    pairs: list[PairResult] = field(default_factory=list)
    verdict: Any = None  # the judge's
    skipped: str | None = None  # the op can't run on a side here: why

    @property
    def log_ratios(self) -> list[float]:
        return [r for p in self.pairs if (r := p.log_ratio) is not None]


class Stopped(KeyboardInterrupt):
    """A Ctrl-C during `compare`: `compared` holds the points that had their first pairs, judged together."""

    def __init__(self, compared: list[Compared]):
        super().__init__()
        self.compared = compared


class PairFailed(Exception):
    """A paired worker crashed, hung or never connected: the message says which and why."""


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
    """One side's worker in a pair: started with a paired request (forked by the side's server, else spawned), its
    socket, its stops and continues."""

    def __init__(self, side: Side, point: Point, server: manager.ForkServer | None, directory: Path, name: str):
        self.side, self.name, self.log = side, name, directory / f"{name}.log"
        self.home = tempfile.mkdtemp(prefix="nnbench-pair-")  # private (0700), and short: a socket path is <108 bytes
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(os.path.join(self.home, "s"))
        self.listener.listen(1)
        self.conn: socket.socket | None = None
        self.buffer, self.family, self.rc = b"", [], None
        request = dataclasses.replace(side.request, points=(point,), paired=self.listener.getsockname())
        path = directory / f"{name}-request.json"
        path.write_text(request.to_json())
        worker = None
        with contextlib.suppress(manager.ServerUnavailable):
            worker = server.start(path, directory / f"{name}-results.jsonl", self.log) if server else None
        self.worker = worker or manager.Spawned(side.python, side.environ, path, directory / f"{name}-results.jsonl",
                                                self.log)

    def prepared(self) -> Prepared:
        """Wait for the worker to connect and prepare its op."""
        deadline = time.monotonic() + self.side.timeout_s
        while not select.select([self.listener], [], [], 0.5)[0]:
            if self.wait(0) is not None:
                raise PairFailed(f"{manager.exit_reason(self.rc, f'worker {self.name}')} before it connected")
            if time.monotonic() > deadline:
                raise PairFailed(f"worker {self.name} did not connect within {self.side.timeout_s:g} s")
        self.conn, _ = self.listener.accept()
        pid = self.conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12)  # struct ucred: pid, uid, gid
        if int.from_bytes(pid[:4], "little") != self.worker.pid:
            raise PairFailed(f"another process connected to worker {self.name}'s socket")
        return Prepared.from_json(self.read(self.side.timeout_s))

    def read(self, timeout: float) -> str:
        """The worker's next line; PairFailed once it is gone or silent for `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.conn], [], [], left)[0]:
                raise PairFailed(f"worker {self.name} gave no answer within {timeout:g} s")
            try:
                data = self.conn.recv(1 << 20)
            except OSError:  # reset by a worker that died
                data = b""
            if not data:
                rc = self.wait(5)
                raise PairFailed(manager.exit_reason(rc, f"worker {self.name}") if rc is not None else
                                 f"worker {self.name} hung up")
            self.buffer += data
        line, self.buffer = self.buffer.split(b"\n", 1)
        return line.decode()

    def burst(self, seconds: float) -> Burst:
        with contextlib.suppress(OSError):  # a worker that died: its reason comes from the read
            self.conn.sendall(Command("burst", seconds).to_json().encode() + b"\n")
        return Burst.from_json(self.read(self.side.timeout_s + 100 * seconds))

    def stop(self) -> None:
        """Stop the worker and whatever it started, and wait until every thread of each has stopped. Its children
        are read at its first stop, once prepared: a step that is compiled starts no process of its own. psutil
        checks each process's identity before it signals it, so a pid that was reused is never stopped."""
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
                raise PairFailed(f"worker {self.name} did not stop")
            time.sleep(0.0005)

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


def orders(design: Design, index: int, rng: np.random.Generator) -> list[str]:
    """The sides' order in each round of pair `index`: AB, BA, AB, ... (starting with BA in odd pairs), or random."""
    if design.order == "random":
        return ["".join(rng.permutation(list(SIDES))) for _ in range(design.rounds)]
    return ["AB" if (r + index) % 2 == 0 else "BA" for r in range(design.rounds)]


def run_pair(a: Side, b: Side, point: Point, design: Design, index: int, servers: dict[str, Any], directory: Path,
             rng: np.random.Generator) -> PairResult:
    """One fresh pair on `point`'s one op: each worker started and prepared while the other is stopped, then
    `design.rounds` rounds of one burst each, one worker running at a time. A fault fails this pair only."""
    directory.mkdir(parents=True, exist_ok=True)
    out, t0 = PairResult(index), time.perf_counter()
    workers: dict[str, PairedWorker] = {}
    try:
        for name in (SIDES if index % 2 == 0 else SIDES[::-1]):  # who prepares first alternates too
            w = workers[name] = PairedWorker(a if name == "A" else b, point, servers[name], directory, name)
            setattr(out, name.lower(), w.prepared())
            w.stop()
        for seq in orders(design, index, rng) if out.a.status == out.b.status == "ok" else ():
            for name in seq:
                w = workers[name]
                w.cont()
                (out.a_bursts if name == "A" else out.b_bursts).append(w.burst(design.burst_s))
                w.stop()
                out.order += name
        for w in workers.values():
            w.end()
    except PairFailed as e:
        out.failure = str(e)
        out.stderr_tail = "\n".join(f"--- worker {n}\n{w.log.read_text(errors='replace')[-1500:]}"
                                    for n, w in workers.items() if w.log.exists())
    finally:  # an interrupt or a failure: never leave a worker stopped, or measuring
        for w in workers.values():
            w.kill()
            w.close()
        out.wall_s = time.perf_counter() - t0
        (directory / PAIR).write_text(out.to_json())
    return out


def compare(a: Side, b: Side, design: Design, judge: Judge, directory: Path,
            on_pair: Callable[[Compared, PairResult], None] = lambda c, p: None) -> list[Compared]:
    """Compare A and B point by point, paired: `design.pairs` fresh pairs per point's op, every op judged together by
    `judge`, then more pairs for each one it leaves inconclusive, up to `design.max_pairs`, judged again.

    Each side's workers are forked by one fork server in its own interpreter and environment (start=fork), or
    spawned. `on_pair(compared, pair)` hears of each pair as it ends.
    """
    ops = point_ops(a, b)
    with ThreadPoolExecutor(2) as pool:  # both servers import their framework at once
        servers = dict(zip(SIDES, pool.map(server, (a, b), (directory / f"server-{n}.log" for n in SIDES))))
    rng = np.random.default_rng(design.seed)
    results = [Compared(p.batch_size, op) for p, op in ops]

    def add(i: int, n: int) -> None:
        point, op = ops[i]
        c = results[i]
        for _ in range(n):
            k = len(c.pairs)
            pair = run_pair(a, b, Point(point.batch_size, (op,)), design, k, servers, directory /
                            f"bs{point.batch_size}-{op}" / f"pair-{k}", rng)
            c.pairs.append(pair)
            on_pair(c, pair)
            skipped = [p.reason for p in (pair.a, pair.b) if p is not None and p.status != "ok"]
            if skipped:
                c.skipped = skipped[0]
                return

    try:
        for i in range(len(ops)):
            add(i, design.pairs)
        while True:
            judged(results, judge)
            more = [i for i, c in enumerate(results)
                    if not c.verdict.conclusive and c.skipped is None and len(c.pairs) < design.max_pairs]
            if not more:
                return results
            for i in more:
                add(i, min(max(2, design.pairs // 2), design.max_pairs - len(results[i].pairs)))
    except KeyboardInterrupt:  # the points that had their first pairs are judged together, and kept
        raise Stopped(judged([c for c in results if len(c.pairs) >= design.pairs or c.skipped is not None],
                             judge)) from None
    finally:
        for s in servers.values():
            if s is not None:
                s.close()


def point_ops(a: Side, b: Side) -> list[tuple[Point, str]]:
    """The (point, op)s both sides measure; ValueError where they can't be paired."""
    if "external" in (a.request.framework, b.request.framework):
        raise ValueError("framework=external can't be paired: its runner times itself, so its bursts can't be "
                         "interleaved with another worker's")
    ops = [(p, op) for p in a.request.points for op in p.ops]
    theirs = [(p.batch_size, op) for p in b.request.points for op in p.ops]
    if [(p.batch_size, op) for p, op in ops] != theirs:
        raise ValueError(f"A and B measure different points: {a.request.points} against {b.request.points}")
    return ops


def judged(results: list[Compared], judge: Judge) -> list[Compared]:
    """The points with their judgments, made together (Benjamini-Hochberg across them)."""
    for c, v in zip(results, judge([c.log_ratios for c in results]) if results else ()):
        c.verdict = v
    return results


def server(side: Side, log: Path) -> manager.ForkServer | None:
    """The side's fork server (start=fork), or None: its workers are spawned (also where it can't start)."""
    if side.start != "fork" or side.request.framework == "external":
        return None
    log.parent.mkdir(parents=True, exist_ok=True)
    try:
        return manager.ForkServer(side.python, side.request.framework, side.environ, log)
    except manager.ServerUnavailable:
        return None

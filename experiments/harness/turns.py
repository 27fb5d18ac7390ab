"""The workers of a trial taking turns: each side's worker started with a paired request (forked by its side's fork
server, else spawned), its socket and commands, and its stops (SIGSTOP, every thread) and continues. Parent side.

An idle worker must take no CPU: its OpenMP threads spin-wait after each op (libgomp's active wait) and take the cores
the running worker's threads need (interleaved bursts spread 65% between A/A pairs with both running, 3.2% with the
idle one stopped, torch LeNet bs32 inference on 2 cores). So it is stopped (SIGSTOP, which holds every thread, and
its children too) and continued for its turn (SIGCONT), which leaves every measured setting (threads, wait policy)
alone. The fork servers wait in waitpid and the parent in a read: neither spins.
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
from pathlib import Path

import psutil

from experiments.common.config import EXTERNAL
from experiments.common.protocol import Burst, Command, Prepared, Ready
from experiments.harness import manager
from experiments.harness.trials import Cell, Lifetime, Side, letter

class PairFailed(Exception):
    """A paired worker crashed, hung or never connected: the message says which and why; `side` is its side, `hung`
    whether it fell silent (killed after bench.timeout_s) rather than crashed."""

    def __init__(self, message: str, side: int | None = None, hung: bool = False):
        super().__init__(message)
        self.side, self.hung = side, hung


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
    """One side's worker in a trial, or one serving several sides (`indices`, the first's request, the others'
    set-ups as its variants): started with a paired request (forked by the side's server, else spawned), its socket,
    its commands, its stops and continues, when it started and was reaped."""

    def __init__(self, sides: list[Side], server: manager.ForkServer | None, directory: Path, indices: list[int]):
        side = sides[0]
        self.side, self.indices, self.index, self.name = side, indices, indices[0], "".join(map(letter, indices))
        self.started, self.ended = time.time(), None
        self.log = directory / f"{self.name}.log"
        self.home = tempfile.mkdtemp(prefix="nnbench-pair-")  # private (0700), and short: a socket path is <108 bytes
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(os.path.join(self.home, "s"))
        self.listener.listen(1)
        self.conn: socket.socket | None = None
        self.buffer, self.family, self.rc = b"", [], None
        request = dataclasses.replace(side.request, paired=self.listener.getsockname(),
                                      variants=tuple(s.request.setup for s in sides[1:]))
        path, results = directory / f"{self.name}-request.json", directory / f"{self.name}-results.jsonl"
        path.write_text(request.to_json())
        worker = None
        with contextlib.suppress(manager.ServerUnavailable):
            worker = server.start(path, results, self.log) if server else None
        self.worker = worker or manager.Spawned(side.python, side.environ, path, results, self.log)

    def failed(self, why: str, hung: bool = False) -> PairFailed:
        return PairFailed(why, self.index, hung)

    def ready(self) -> list[Ready]:
        """Wait for the worker to connect and say it is ready, once per side it serves."""
        deadline = time.monotonic() + self.side.timeout_s
        while not select.select([self.listener], [], [], 0.5)[0]:
            if self.wait(0) is not None:
                raise self.failed(manager.exit_reason(self.rc, f"worker {self.name}", self.log) + " (before it "
                                  "connected)")
            if time.monotonic() > deadline:
                raise self.failed(f"worker {self.name} did not connect within {self.side.timeout_s:g} s", hung=True)
        self.conn, _ = self.listener.accept()
        pid = self.conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12)  # struct ucred: pid, uid, gid
        if int.from_bytes(pid[:4], "little") != self.worker.pid:
            raise self.failed(f"another process connected to worker {self.name}'s socket")
        return [Ready.from_json(self.read(self.side.timeout_s)) for _ in self.indices]

    def read(self, timeout: float) -> str:
        """The worker's next line; PairFailed once it is gone or silent for `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.conn], [], [], left)[0]:
                raise self.failed(f"worker {self.name} gave no answer within {timeout:g} s", hung=True)
            try:
                data = self.conn.recv(1 << 20)
            except OSError:  # reset by a worker that died
                data = b""
            if not data:
                rc = self.wait(5)
                raise self.failed(manager.exit_reason(rc, f"worker {self.name}", self.log) if rc is not None else
                                  f"worker {self.name} hung up")
            self.buffer += data
        line, self.buffer = self.buffer.split(b"\n", 1)
        return line.decode()

    def ask(self, command: Command, timeout: float) -> str:
        with contextlib.suppress(OSError):  # a worker that died: its reason comes from the read
            self.conn.sendall(command.to_json().encode() + b"\n")
        return self.read(timeout)

    def prepare(self, cell: Cell, variant: int = 0, layout: int = 0) -> Prepared:
        """The cell's op prepared for the side it serves `variant`-th (a failure then names that side), its buffers
        placed by `layout` (measure/worker.py: shifted)."""
        self.index = self.indices[variant]
        return Prepared.from_json(self.ask(Command("prepare", batch_size=cell.batch_size, op=cell.op, variant=variant,
                                                   layout=layout),
                                           self.side.timeout_s))

    def burst(self, seconds: float, variant: int = 0) -> Burst:
        self.index = self.indices[variant]
        return Burst.from_json(self.ask(Command("burst", seconds, variant=variant),
                                        self.side.timeout_s + 100 * seconds))

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
                raise self.failed(f"worker {self.name} did not stop", hung=True)
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
            self.ended = time.time() if self.rc is not None else None
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
            self.rc, self.ended = -signal.SIGKILL, time.time()

    def close(self) -> None:
        for s in (self.conn, self.listener):
            if s is not None:
                s.close()
        shutil.rmtree(self.home, ignore_errors=True)


class Variant:
    """A side served by a worker that serves several: its commands name the side's set-up; the worker stops and
    continues for it."""

    def __init__(self, worker: PairedWorker, k: int):
        self.worker, self.k = worker, k

    def prepare(self, cell: Cell, layout: int = 0) -> Prepared:
        return self.worker.prepare(cell, self.k, layout)

    def burst(self, seconds: float) -> Burst:
        return self.worker.burst(seconds, self.k)

    def stop(self) -> None:
        self.worker.stop()

    def cont(self) -> None:
        self.worker.cont()

    def kill(self) -> None:
        self.worker.kill()

    def cpu_s(self) -> float:
        """The worker's CPU time, counted once: by its first side."""
        return self.worker.cpu_s() if self.k == 0 else 0.0


class Absent:
    """A side whose worker runs in another stage of the trial: it sits this stage's cells out."""

    def cpu_s(self) -> float:
        return 0.0


class Workers:
    """One trial's workers (of one stage), started together; every one killed and closed on the way out. `units`:
    the sides each worker serves (default: a worker per side); a side in none sits the stage out (`absent`)."""

    def __init__(self, sides: list[Side], servers: list, directory: Path, units: list[tuple[int, ...]] | None = None,
                 stage: int = 0):
        self.sides, self.servers, self.directory, self.stage = sides, servers, directory, stage
        self.units = units if units is not None else [(i,) for i in range(len(sides))]
        self.processes: list[PairedWorker] = []
        self.live: list[PairedWorker | Variant | Absent] = [Absent() for _ in sides]  # per side: what it talks to
        self.ready: list[Ready | None] = [None] * len(sides)
        self.lives: list[Lifetime] = []  # each worker's, reaped ones with their end
        self.order = ""

    @property
    def taking_turns(self) -> bool:
        """Whether more than one worker lives: a worker alone is never stopped."""
        return len(self.units) > 1

    @property
    def absent(self) -> set[int]:
        return {i for i, w in enumerate(self.live) if isinstance(w, Absent)}

    def start(self, one_by_one: bool = False, order: list[int] | None = None) -> "Workers":
        """Start every unit's worker, in `order` (the units' indices; default: as listed; `self.order`: the sides'
        letters, first started first); once each is ready, stop it. PairFailed (every one killed) where one can't.
        They start at once, or `one_by_one`: the first trial's workers calibrate their framework's peak as they
        start (`measure.peaks`), which another worker's start beside them would disturb."""
        order = list(range(len(self.units))) if order is None else order
        self.directory.mkdir(parents=True, exist_ok=True)
        self.order = "".join(letter(i) for u in order for i in self.units[u])
        try:
            for u in order:
                unit = self.units[u]
                w = PairedWorker([self.sides[i] for i in unit], self.servers[unit[0]], self.directory, list(unit))
                self.processes.append(w)
                self.lives.append(Lifetime(w.name, w.worker.pid, self.stage, w.started))
                for k, i in enumerate(unit):
                    self.live[i] = w if len(unit) == 1 else Variant(w, k)
                if one_by_one:
                    self.started(w)
            for w in self.processes:  # none measures until every one is ready and stopped
                if w.conn is None:
                    self.started(w)
        except BaseException:
            self.__exit__(PairFailed, None, None)
            raise
        return self

    def started(self, w: PairedWorker) -> None:
        for i, ready in zip(w.indices, w.ready()):
            self.ready[i] = ready
        if self.taking_turns:  # one worker alone has no one to take turns with
            w.stop()

    def __enter__(self) -> "Workers":
        return self

    def __exit__(self, *exc) -> None:
        for w, life in zip(self.processes, self.lives):
            if exc[0] is None:
                with contextlib.suppress(PairFailed):
                    w.end()
            w.kill()
            w.close()
            life.ended = w.ended


def server(side: Side, log: Path) -> manager.ForkServer | None:
    """The side's fork server (start=fork), or None: its workers are spawned (also where it can't start)."""
    if side.start != "fork" or side.request.framework == EXTERNAL:
        return None
    log.parent.mkdir(parents=True, exist_ok=True)
    try:
        return manager.fork_server(side.python, side.request.framework, side.environ, log)
    except manager.ServerUnavailable:
        return None

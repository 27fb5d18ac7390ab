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
from experiments.harness.trials import Cell, Side, letter

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

    def prepare(self, cell: Cell, layout: int = 0) -> Prepared:
        return Prepared.from_json(self.ask(Command("prepare", batch_size=cell.batch_size, op=cell.op, layout=layout),
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


class Workers:
    """One trial's workers, one per side, started together; every one killed and closed on the way out. `live[i]`
    and `ready[i]` are side i's, whatever order they started in (`order`: the sides' letters, first started first)."""

    def __init__(self, sides: list[Side], servers: list, directory: Path):
        self.sides, self.servers, self.directory = sides, servers, directory
        self.live: list[PairedWorker] = []
        self.ready: list[Ready] = []
        self.order = ""

    def start(self, one_by_one: bool = False, order: list[int] | None = None) -> "Workers":
        """Start every side's worker, in `order` (the sides' indices; default: as listed); once each is ready, stop
        it. PairFailed (every one killed) where one can't. They start at once, or `one_by_one`: the first trial's
        workers calibrate their framework's peak as they start (`measure.peaks`), which another worker's start beside
        them would disturb."""
        order = list(range(len(self.sides))) if order is None else order
        self.directory.mkdir(parents=True, exist_ok=True)
        self.order, started, ready = "".join(map(letter, order)), {}, {}
        try:
            for i in order:
                started[i] = PairedWorker(self.sides[i], self.servers[i], self.directory, i)
                self.live = [started[j] for j in sorted(started)]
                if one_by_one:
                    ready[i] = self.started(started[i])
            for i in (i for i in order if i not in ready):  # none measures until every one is ready and stopped
                ready[i] = self.started(started[i])
        except BaseException:
            self.__exit__(PairFailed, None, None)
            raise
        self.ready = [ready[i] for i in range(len(self.sides))]
        return self

    def started(self, w: PairedWorker) -> Ready:
        ready = w.ready()
        if len(self.sides) > 1:  # one side alone has no one to take turns with
            w.stop()
        return ready

    def __enter__(self) -> "Workers":
        return self

    def __exit__(self, *exc) -> None:
        for w in self.live:
            if exc[0] is None:
                with contextlib.suppress(PairFailed):
                    w.end()
            w.kill()
            w.close()


def server(side: Side, log: Path) -> manager.ForkServer | None:
    """The side's fork server (start=fork), or None: its workers are spawned (also where it can't start)."""
    if side.start != "fork" or side.request.framework == EXTERNAL:
        return None
    log.parent.mkdir(parents=True, exist_ok=True)
    try:
        return manager.fork_server(side.python, side.request.framework, side.environ, log)
    except manager.ServerUnavailable:
        return None

"""The parent's side of a worker (the measuring process, `measure/worker.py`): start it, watch its results, stop it.

A crash, an OOM kill or a hang fails only the point it hit; a new worker measures the rest. Parent side.
"""
from __future__ import annotations

import atexit
import contextlib
import dataclasses
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable

import psutil

from experiments.common.config import ALLOCATORS, ROOT
from experiments.common.frameworks import every
from experiments.common.protocol import PointResult, Request, Setup

WORKER = "experiments.measure.worker"  # the worker's entry point, run as a module
SERVER = "experiments.measure.server"  # the fork server's


def environ(allocator: str = "system", cache: Path | None = None) -> dict[str, str]:
    """The worker's environment variables: these, plus the suite on the path, no GPU preallocation, the allocator
    and the compile cache (`cache_environ`)."""
    out = dict(os.environ) | ALLOCATORS[allocator] | {"NNBENCH_ALLOCATOR": allocator} | cache_environ(cache)
    out["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"  # never take 75% of a shared GPU
    out["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), out.get("PYTHONPATH")]))
    return out


def exit_reason(rc: int, who: str = "worker", log: Path | None = None) -> str:
    """Why a process ended, in one line: the signal that killed it, or its exit code and the last line it wrote to
    `log` (a Python exception's type and message, e.g. `KeyError: 'VmHWM'`), so the reason reaches the console."""
    if rc < 0:
        name = signal.Signals(-rc).name
        hint = " (likely out of memory)" if -rc == signal.SIGKILL else ""
        return f"{who} killed by {name}{hint}"
    said = last_line(log)
    return f"{who} exited with code {rc}" + (f": {said}" if said else "")


def last_line(log: Path | None) -> str:
    """The last line written to a process's log, cut to 300 characters ("" where there is none)."""
    try:
        with open(log, "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - 4096))
            lines = [ln.strip() for ln in f.read().decode(errors="replace").splitlines() if ln.strip()]
    except (OSError, TypeError):  # no log (TypeError: none given), or one that can't be read
        return ""
    return lines[-1][:300] if lines else ""


def cache_environ(directory: Path | None) -> dict[str, str]:
    """Where the worker's compilers keep what they compiled: `directory` (the sweep's, per environment and host), so
    a point's later processes load what its first one compiled; None: no compiled-graph cache at all."""
    return {k: v for t in every() for k, v in t.cache(directory).items()}  # each backend's own variables


class Spawned:
    """A worker started as a fresh interpreter, `python -m experiments.measure.worker REQUEST RESULTS`, in its own
    session (so a kill reaches whatever it started)."""

    def __init__(self, python: str, environ: dict[str, str], request: Path, results: Path, log: Path):
        with open(log, "w") as out:
            self.proc = subprocess.Popen([python, "-m", WORKER, str(request), str(results)], cwd=ROOT, env=environ,
                                         stdout=out, stderr=subprocess.STDOUT, start_new_session=True)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def wait(self, timeout: float) -> int | None:
        """Its exit code, once it has ended within `timeout` seconds; else None."""
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def kill(self) -> None:
        stop(self.proc)


class ServerUnavailable(Exception):
    """The fork server could not start fresh workers; the message says why (the job spawns them instead)."""


class ForkServer:
    """One job's fork server (`measure/server.py`; a sweep's groups share it: `keep`): started once, in the job's
    interpreter and environment, it pays the interpreter's start and the framework's imports once and forks a fresh
    worker per process (`Forked`)."""

    def __init__(self, python: str, framework: str, environ: dict[str, str], log: Path, timeout_s: float = 120):
        self.key, self.busy = kept_key(python, framework, environ), False  # busy: a worker it forked may still run
        with open(log, "w") as err:
            self.proc = subprocess.Popen([python, "-m", SERVER, framework], cwd=ROOT, env=environ,
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
                                         start_new_session=True)
        self.buffer = b""
        hello = self.read(timeout_s)
        if not hello or not hello.get("ready"):
            self.close()
            why = (hello or {}).get("problem") or log.read_text(errors="replace").strip().splitlines()[-1:] or \
                ["no answer"]
            raise ServerUnavailable(why if isinstance(why, str) else why[0])

    def read(self, timeout: float) -> dict | None:
        """The server's next message within `timeout` seconds; None if none came; {"eof": True} once it is gone."""
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.proc.stdout], [], [], left)[0]:
                return None
            data = os.read(self.proc.stdout.fileno(), 65536)
            if not data:
                return {"eof": True}
            self.buffer += data
        line, self.buffer = self.buffer.split(b"\n", 1)
        return json.loads(line)

    def start(self, request: Path, results: Path, log: Path) -> "Forked":
        try:
            self.proc.stdin.write((json.dumps({"request": str(request), "results": str(results), "log": str(log)})
                                   + "\n").encode())
            self.proc.stdin.flush()
        except OSError as e:
            raise ServerUnavailable(f"the fork server is gone ({e})") from None
        self.busy = True
        started = self.read(60)
        if not started or "pid" not in started:
            raise ServerUnavailable("the fork server did not start a worker")
        return Forked(self, started["pid"])

    def close(self) -> None:
        """Stop the server (and any worker it still has): end its requests, then kill its session if need be."""
        with contextlib.suppress(OSError):
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            stop(self.proc)


class Forked:
    """A worker the fork server forked: a fresh process, in the server's process group."""

    def __init__(self, server: ForkServer, pid: int):
        self.server, self.pid = server, pid

    def wait(self, timeout: float) -> int | None:
        msg = self.server.read(timeout)
        if msg is None:
            return None
        if msg.get("eof"):  # the server itself died (an OOM kill takes the largest: often the worker's server)
            return -signal.SIGKILL
        self.server.busy = False
        return msg["rc"]

    def kill(self) -> None:
        """Kill the worker and whatever it started, and let the server reap it."""
        with contextlib.suppress(psutil.Error):
            worker = psutil.Process(self.pid)
            for p in [*worker.children(recursive=True), worker]:
                with contextlib.suppress(psutil.Error):
                    p.kill()
        self.wait(30)


Worker = Spawned | Forked

# The fork servers a sweep keeps between its groups (`keep`): idle ones, by interpreter, framework and environment.
# A sweep run by Hydra's basic launcher measures its groups one after another in one process, and each group's
# sides would otherwise start a server (and import their framework) again. None: every server is closed after use.
KEPT: dict[tuple, list[ForkServer]] | None = None
KEPT_LOCK = threading.Lock()


def kept_key(python: str, framework: str, environ: dict[str, str]) -> tuple:
    return python, framework, tuple(sorted(environ.items()))


def keep() -> None:
    """From now on this process keeps its fork servers for its later groups, until `close_kept` (or its exit)."""
    global KEPT
    KEPT = {} if KEPT is None else KEPT


def fork_server(python: str, framework: str, environ: dict[str, str], log: Path) -> ForkServer:
    """An idle fork server this process kept for the same interpreter, framework and environment, else a new one
    (ServerUnavailable where it can't start). A group's sides ask at once, from threads."""
    while (server := taken(kept_key(python, framework, environ))) is not None:
        if server.proc.poll() is None:
            return server
        server.close()
    return ForkServer(python, framework, environ, log)


def taken(key: tuple) -> ForkServer | None:
    with KEPT_LOCK:
        idle = (KEPT or {}).get(key)
        return idle.pop() if idle else None


def done(server: ForkServer) -> None:
    """A group is done with its server: kept for a later group (`keep`), if it is idle and alive; else closed."""
    with KEPT_LOCK:
        if KEPT is not None and not server.busy and server.proc.poll() is None:
            KEPT.setdefault(server.key, []).append(server)
            return
    server.close()


def close_kept() -> None:
    """Close every server kept (the sweep's end); later servers are closed after use again."""
    global KEPT
    with KEPT_LOCK:
        kept, KEPT = KEPT or {}, None
    for server in (s for servers in kept.values() for s in servers):
        server.close()


atexit.register(close_kept)  # a sweep stopped on its way still closes them (each would also end at its stdin's EOF)


@dataclasses.dataclass(frozen=True)
class Launcher:
    """How a job's workers start: forked by the job's fork server (`server`), or spawned as `python -m
    experiments.measure.worker` with the allocator and the compile cache in their environment (`environ`)."""

    python: str = sys.executable
    allocator: str = "system"
    cache: Path | None = None
    server: ForkServer | None = None

    def spawn(self, request: Path, results: Path, log: Path) -> Spawned:
        return Spawned(self.python, environ(self.allocator, self.cache), request, results, log)


def run(request: Request, job_dir: Path, timeout_s: float, on_result: Callable[[PointResult], None] = lambda r: None,
        launcher: Launcher = Launcher()) -> list[PointResult]:
    """Measure all points, one worker at a time (forked by the launcher's server, else spawned); a crash or timeout
    fails only the point it happened in, and a new worker measures the rest.

    Each result is handed to `on_result` as soon as the worker writes it.
    """
    job_dir.mkdir(parents=True, exist_ok=True)
    results_path = job_dir / "results.jsonl"
    results_path.unlink(missing_ok=True)
    points, out, attempt = request.points, [], 0

    def take(result: PointResult) -> None:
        out.append(result)
        on_result(result)

    while len(out) < len(points):
        attempt += 1
        request_path = job_dir / f"request-{attempt}.json"
        request_path.write_text(dataclasses.replace(request, points=points[len(out):]).to_json())
        log_path = job_dir / f"worker-{attempt}.log"
        offset = results_path.stat().st_size if results_path.exists() else 0
        worker: Worker | None = None
        try:
            worker = launcher.server.start(request_path, results_path, log_path) if launcher.server else None
        except ServerUnavailable:
            launcher = dataclasses.replace(launcher, server=None)  # spawn the rest
        worker = worker or launcher.spawn(request_path, results_path, log_path)
        try:
            reason = watch(worker, results_path, offset, timeout_s, take, log_path)
        except BaseException:  # a harness error or an interrupt: never leave the worker measuring
            worker.kill()
            raise
        if len(out) < len(points):
            tail = log_path.read_text(errors="replace")[-3000:]
            take(PointResult(points[len(out)].batch_size, failure=reason or "worker ended without a result",
                             stderr_tail=tail))
    return out


def watch(worker: Worker, results: Path, offset: int, timeout_s: float, take: Callable[[PointResult], None],
          log: Path | None = None) -> str | None:
    """Pass on new results while the worker runs; each point gets timeout_s from the end of the previous one. Why it
    ended without them (`log`: its output, whose last line says why), or None."""
    deadline = time.monotonic() + timeout_s
    while True:
        rc = worker.wait(0.5)
        lines, offset = new_lines(results, offset)
        for line in lines:
            take(PointResult.from_json(line))
            deadline = time.monotonic() + timeout_s
        if rc is not None:
            return None if rc == 0 else exit_reason(rc, log=log)
        if time.monotonic() > deadline:
            worker.kill()
            return f"timed out: no result within bench.timeout_s={timeout_s:g} s"


def stop(proc: subprocess.Popen) -> None:
    """Kill a process and whatever it started (its own session), and reap it."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def new_lines(path: Path, offset: int) -> tuple[list[str], int]:
    """Complete lines written since `offset`, and the offset after them: the worker may be writing the next one.

    Polling reads only the new bytes, so the parent stays off the cores while the worker measures.
    """
    if not path.exists():
        return [], offset
    with open(path, "rb") as f:
        f.seek(offset)
        data = f.read()
    end = data.rfind(b"\n") + 1
    return [line.decode() for line in data[:end].splitlines() if line.strip()], offset + end


def probe(asks: list[tuple[str, str, Setup, str]]) -> list[tuple[str | None, str | None, str | None]]:
    """Ask workers, in parallel, whether each (python, framework, set-up, allocator) works: (None, fingerprint, the
    device its workers will take, e.g. `tpu:0`) where it does, (the problem, None, None) where it doesn't."""
    procs = [subprocess.Popen([python, "-m", WORKER, "--probe", fw, setup.to_json()], cwd=ROOT,
                              env=environ(allocator), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for python, fw, setup, allocator in asks]
    out = []
    for p in procs:
        stdout, stderr = p.communicate()
        lines = stdout.strip().splitlines()
        if p.returncode == 0:
            out.append((None, lines[1] if len(lines) > 1 else None,  # an interpreter of old may print the device only
                        lines[0] if lines else None))
        else:
            out.append((stdout.strip() or (stderr.strip().splitlines() or [f"probe exited with {p.returncode}"])[-1],
                        None, None))
    return out

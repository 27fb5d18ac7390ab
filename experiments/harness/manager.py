"""The parent's side of a worker (the measuring process, `measure/worker.py`): start it, watch its results, stop it.

A crash, an OOM kill or a hang fails only the point it hit; a new worker measures the rest. Parent side.
"""
from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

from experiments.common.config import ALLOCATORS, ROOT
from experiments.common.protocol import PointResult, Request, Setup

WORKER = "experiments.measure.worker"  # the worker's entry point, run as a module


def env(allocator: str = "system") -> dict[str, str]:
    """The worker's environment: this one, plus the suite on the path, no GPU preallocation and the allocator."""
    out = dict(os.environ) | ALLOCATORS[allocator] | {"NNBENCH_ALLOCATOR": allocator}
    out["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"  # never take 75% of a shared GPU
    out["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), out.get("PYTHONPATH")]))
    return out


def exit_reason(rc: int, who: str = "worker") -> str:
    if rc < 0:
        name = signal.Signals(-rc).name
        hint = " (likely out of memory)" if -rc == signal.SIGKILL else ""
        return f"{who} killed by {name}{hint}"
    return f"{who} exited with code {rc}"


def run(request: Request, job_dir: Path, timeout_s: float, python: str = sys.executable,
        on_result: Callable[[PointResult], None] = lambda r: None, allocator: str = "system") -> list[PointResult]:
    """Measure all points, one worker at a time; a crash or timeout fails only the point it happened in.

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
        with open(log_path, "w") as log:
            proc = subprocess.Popen([python, "-m", WORKER, str(request_path), str(results_path)],
                                    cwd=ROOT, env=env(allocator), stdout=log, stderr=subprocess.STDOUT,
                                    start_new_session=True)
            try:
                reason = watch(proc, results_path, offset, timeout_s, take)
            except BaseException:  # a harness error or an interrupt: never leave the worker measuring
                stop(proc)
                raise
        if len(out) < len(points):
            tail = log_path.read_text(errors="replace")[-3000:]
            take(PointResult(points[len(out)].batch_size, failure=reason or "worker ended without a result",
                             stderr_tail=tail))
    return out


def watch(proc: subprocess.Popen, results: Path, offset: int, timeout_s: float,
          take: Callable[[PointResult], None]) -> str | None:
    """Pass on new results while the worker runs; each point gets timeout_s from the end of the previous one."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            rc = proc.wait(timeout=0.5)
        except subprocess.TimeoutExpired:
            rc = None
        lines, offset = new_lines(results, offset)
        for line in lines:
            take(PointResult.from_json(line))
            deadline = time.monotonic() + timeout_s
        if rc is not None:
            return None if rc == 0 else exit_reason(rc)
        if time.monotonic() > deadline:
            stop(proc)
            return f"timed out: no result within bench.timeout_s={timeout_s:g} s"


def stop(proc: subprocess.Popen) -> None:
    """Kill the worker and whatever it started (its own session), and reap it."""
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


def probe(asks: list[tuple[str, str, Setup, str]]) -> list[tuple[str | None, str | None]]:
    """Ask workers, in parallel, whether each (python, framework, set-up, allocator) works: (None, fingerprint)
    where it does, (the problem, None) where it doesn't."""
    procs = [subprocess.Popen([python, "-m", WORKER, "--probe", fw, setup.to_json()], cwd=ROOT,
                              env=env(allocator), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for python, fw, setup, allocator in asks]
    out = []
    for p in procs:
        stdout, stderr = p.communicate()
        lines = stdout.strip().splitlines()
        if p.returncode == 0:
            out.append((None, lines[1] if len(lines) > 1 else None))  # an interpreter of old may print the device only
        else:
            out.append((stdout.strip() or (stderr.strip().splitlines() or [f"probe exited with {p.returncode}"])[-1],
                        None))
    return out

"""Self-benchmark of the harness: `nnbench overhead [--sweep]` prints the figures behind its speed goals.

- harness/bare: the same callable timed by `timing.measure` and by a bare perf_counter loop, interleaved
  in one process (goal: <= 1.02);
- with --sweep: the README sweep's wall time with bench=quick and bench=default (goals: < 90 s, < 3 min),
  and each job's fixed cost outside the measuring budget (worker starts, imports, logging; goal: <= 3 s).
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from experiments.common.config import README_SWEEP, ROOT, bench_budget
from experiments.common.errors import OK, BadInput, first_line
from experiments.measure.timing import measure
from experiments.sweep.points import TIMES, JobTimes


def bare_loop(fn, sync, calls: int) -> float:
    t0 = time.perf_counter()
    for _ in range(calls):
        sync(fn())
    return (time.perf_counter() - t0) / calls


def harness_ratio(rounds: int = 7) -> tuple[float, float, float]:
    """Median per-call time by the harness and by a bare loop, interleaved; returns (harness, bare, ratio)."""
    a = np.random.default_rng(0).random((128, 128), dtype=np.float32)

    def fn():
        return a @ a

    def sync(_):
        pass

    budget = replace(bench_budget("default"), warmup_s=0.1, min_samples=100, max_samples=100, max_time_s=1e9,
                     target_rel_ci=0.0)
    harness, bare = [], []
    for _ in range(rounds):
        m = measure(fn, sync, budget)
        harness.append(float(np.median(m.samples_s)))
        bare.append(bare_loop(fn, sync, m.block * len(m.samples_s)))
    h, b = float(np.median(harness)), float(np.median(bare))
    return h, b, h / b


def sweep(bench: str, workdir: Path) -> tuple[float, list[JobTimes]]:
    """Run the README sweep; return its wall time and where each job's time went."""
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    env["PYTHONPATH"] = str(ROOT)
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "experiments.run", "-m", *README_SWEEP, f"bench={bench}"], cwd=workdir,
                       env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if r.returncode:
        raise BadInput(f"the README sweep failed (exit {r.returncode}): {first_line(Exception(r.stderr[-2000:]))}")
    return wall, [JobTimes.from_json(p.read_text()) for p in sorted(workdir.rglob(TIMES))]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--sweep", action="store_true", help="also time the README sweep (several minutes)")


def run(args: argparse.Namespace) -> int:
    h, b, ratio = harness_ratio()
    print(f"harness median {h * 1e6:.2f} us, bare loop {b * 1e6:.2f} us: harness/bare = {ratio:.3f} (goal <= 1.02)")
    if not args.sweep:
        return OK
    for bench, goal in (("quick", 90), ("default", 180)):
        with tempfile.TemporaryDirectory() as tmp:
            wall, jobs = sweep(bench, Path(tmp))
        print(f"README sweep, bench={bench}: {wall:.1f} s wall (goal < {goal} s)")
        for i, j in enumerate(jobs):
            print(f"  job {i}: {j.wall_s:.2f} s, measuring {j.measuring_s:.2f} s, fixed cost {j.fixed_s:.2f} s "
                  "(goal <= 3 s)")
        print(f"  start-up outside the jobs (Hydra, imports, store, checks): {wall - sum(j.wall_s for j in jobs):.2f} s")
    return OK

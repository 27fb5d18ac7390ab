"""Self-benchmark of the harness: `nnbench overhead [--readme | overrides ...]` prints the figures behind its goals.

- harness/bare: the same callable timed by `timing.measure` and by a bare perf_counter loop, interleaved
  in one process (goal: <= 1.02);
- with --readme, or overrides: the README sweep (or the sweep the overrides give) at the default bench: its wall
  time against its pure sampling time (ops measured × processes × bench.min_time_s; goal: wall <= 1.5 × sampling),
  and where the rest went: the fork servers' and workers' starts (imports), first calls (compiles or cache loads),
  warm-up, sampling past the minimum, logging, the rest of the jobs (model builds, the workers' set-up) and the
  sweep's own work outside its jobs (Hydra, checks, the store, the report).
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

from experiments.common.child import run_to_end
from experiments.common.config import README_SWEEP, ROOT, bench_budget, register
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


def sweep(workdir: Path, overrides: list[str]) -> tuple[float, list[JobTimes]]:
    """Run the sweep; return its wall time and where each job's time went."""
    environ = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    environ["PYTHONPATH"] = str(ROOT)
    t0 = time.perf_counter()
    r = run_to_end([sys.executable, "-m", "experiments.run", "-m", *overrides], cwd=workdir, env=environ,
                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - t0
    if r.returncode:
        raise BadInput(f"the sweep failed (exit {r.returncode}): {first_line(Exception(r.stderr[-2000:]))}")
    return wall, [JobTimes.from_json(p.read_text()) for p in sorted(workdir.rglob(TIMES))]


def breakdown(wall: float, jobs: list[JobTimes], min_time_s: float) -> list[tuple[str, float]]:
    """Where a sweep's wall time went, in seconds, the parts adding up to `wall`."""
    floor = sum(j.op_points for j in jobs) * min_time_s
    jobs_wall = sum(j.wall_s for j in jobs)
    parts = [("sampling, the floor (ops × processes × min_time_s)", floor),
             ("sampling past the floor", sum(j.sampling_s for j in jobs) - floor),
             ("fork servers' and workers' starts (imports)", sum(j.server_s + j.startup_s for j in jobs)),
             ("first calls (compiles or cache loads)", sum(j.first_calls_s for j in jobs)),
             ("warm-up", sum(j.warmup_s for j in jobs)),
             ("logging between workers (plots, the store)", sum(j.logging_s for j in jobs))]
    parts.append(("the rest of the jobs (model builds, set-up, polling)", jobs_wall - sum(v for _, v in parts)))
    parts.append(("the sweep outside its jobs (Hydra, checks, the store, the report)", wall - jobs_wall))
    return parts


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--readme", action="store_true", help=f"also time the README sweep ({' '.join(README_SWEEP)}; "
                                                          "minutes)")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="also time the sweep these overrides give")


def run(args: argparse.Namespace) -> int:
    from experiments.sweep import commandline  # Hydra is slow to import: only to validate the overrides

    if args.readme and args.overrides:
        raise BadInput("--readme times the README sweep, the overrides another one: give one of them")
    overrides = args.overrides or (list(README_SWEEP) if args.readme else [])
    if overrides:  # the sweep's door, before anything is timed: a bad override is its one line
        register()
        commandline.explained(["-m", *overrides])
    h, b, ratio = harness_ratio()
    print(f"harness median {h * 1e6:.2f} us, bare loop {b * 1e6:.2f} us: harness/bare = {ratio:.3f} (goal <= 1.02)")
    if not overrides:
        return OK
    with tempfile.TemporaryDirectory() as tmp:
        wall, jobs = sweep(Path(tmp), overrides)
    parts = breakdown(wall, jobs, bench_budget("default").min_time_s)
    floor = parts[0][1]
    print(f"sweep `{' '.join(overrides)}`: {wall:.1f} s wall, {floor:.1f} s of pure sampling "
          f"({sum(j.op_points for j in jobs)} ops × processes × min_time_s): wall/sampling = {wall / floor:.2f} "
          "(goal <= 1.5)")
    for what, seconds in parts:
        print(f"  {seconds:7.1f} s  {seconds / wall:6.1%}  {what}")
    return OK

"""Does nnbench's harness read what other timers read? The same prepared op timed three ways, interleaved.

    nnbench agree [--quick] [--models lenet mlp_relu] [--batch 32] [--op inference]

For each model and framework (jax jit, torch eager: conf/framework's defaults, fp32, one process) the Step that
`load(fw).prepare` returns is timed by `timing.measure` with the default bench budget (bench=quick with
--quick) sampling for `--window` seconds, by `torch.utils.benchmark.Timer.blocked_autorange` with the process's torch threads (its default of
one thread misreads), and by a bare perf_counter loop over blocks of `sync(fn())`. Each reads a median per call
over blocks, for the same window. Many short rounds interleave the three (their order rotating), so drift hits
all alike; a ratio is the median over rounds of the per-round ratio. The last line is `max |ratio-1| = X` over every ratio.

The frameworks run in this process, so a Ctrl-C waits for the next checkpoint (`common.interrupts.deferred`): between
cases, rounds and methods, and inside each method's timing window, between its blocks.
"""
from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time
from dataclasses import dataclass, fields, replace
from typing import Any, Callable

import numpy as np
import psutil
import yaml

import models
from experiments.common import interrupts
from experiments.common.config import CONF, OPS, bench_budget
from experiments.common.frameworks import references
from experiments.common.options import positive
from experiments.common.protocol import Budget, Setup
from experiments.measure.backends import Step, load
from experiments.measure.meter import background_cores, meter
from experiments.measure.timing import measure
from experiments.selfcheck.overhead import bare_loop
FRAMEWORKS = tuple(t.name for t in references())
METHODS = ("harness", "timer", "bare")
QUICK_MODELS = ("mlp_relu", "lenet")
BATCH = 32  # in every model's inference list; matmul_chain runs at its own m


@dataclass(frozen=True)
class Case:
    model: str
    framework: str
    batch: int
    step: Step
    call_s: float  # one call, roughly: a window holds at least CALLS of them

    def budget(self, base: Budget) -> Budget:
        """The harness's budget for this case: the base's rules, sampling for the case's window."""
        window = max(base.min_time_s, CALLS * self.call_s)
        return replace(base, min_time_s=window, max_time_s=window)


CALLS = 30  # calls in a window, at least: fewer left the 26 ms torch matmul_chain's medians 3% apart


def setup(framework: str, precision: str, device: str) -> Setup:
    """The framework's default set-up (conf/framework/<fw>.yaml: jax jit, torch eager)."""
    conf = yaml.safe_load((CONF / "framework" / f"{framework}.yaml").read_text())
    keys = {f.name for f in fields(Setup)} & conf.keys()
    return Setup(precision, device, **{k: conf[k] for k in keys})


def harness(fn: Callable[[], Any], sync: Callable[[Any], None], budget: Budget) -> float:
    return float(np.median(measure(fn, sync, budget).samples_s))


def run_time(budget: Budget) -> float:
    """How long Timer and the bare loop sample: as long as the harness at least does, and not under 0.2 s."""
    return max(budget.min_time_s, 0.2)


def timer(fn: Callable[[], Any], sync: Callable[[Any], None], budget: Budget) -> float:
    import torch  # the check runs torch in this process; its arguments are parsed without it
    from torch.utils.benchmark import Timer

    t = Timer("sync(fn())", globals={"fn": fn, "sync": sync}, num_threads=torch.get_num_threads())
    return t.blocked_autorange(lambda *_: interrupts.checkpoint(), min_run_time=run_time(budget)).median


def bare(fn: Callable[[], Any], sync: Callable[[Any], None], budget: Budget) -> float:
    """Warm up as the harness does, then blocks of plain calls for as long as the harness samples at least."""
    calls, t0 = 0, time.perf_counter()
    while calls < budget.warmup_calls or time.perf_counter() - t0 < budget.warmup_s:
        sync(fn())
        calls += 1
        interrupts.checkpoint()
    block = max(1, math.ceil(budget.min_block_s / ((time.perf_counter() - t0) / calls)))
    samples: list[float] = []
    start = time.perf_counter()
    while len(samples) < budget.min_samples or time.perf_counter() - start < run_time(budget):
        samples.append(bare_loop(fn, sync, block))
        interrupts.checkpoint()
    return float(np.median(samples))


TIMERS = {"harness": harness, "timer": timer, "bare": bare}


def prepare(names: list[str], batch: int | None, op: str, precision: str, device: str) -> list[Case]:
    """Every model × framework, each backend configured once (jax's configure sets global config)."""
    cases = []
    for fw in FRAMEWORKS:
        backend = load(fw)
        backend.configure(setup(fw, precision, device))
        for name in names:
            spec = models.load(name)
            b = spec.batch_sizes["inference"][0] if not spec.trainable else batch or BATCH  # matmul_chain: m
            step = backend.prepare(spec, op, b, 0)
            step.sync(step.fn())  # trace or compile outside the rounds
            t0 = time.perf_counter()
            for _ in range(3):
                step.sync(step.fn())
            cases.append(Case(name, fw, b, step, (time.perf_counter() - t0) / 3))
            interrupts.checkpoint()
    return cases


def interleave(cases: list[Case], budget: Budget, rounds: int) -> dict[tuple[str, str], dict[str, list[float]]]:
    """Per case, each method's median per call in every round; the methods' order rotates round by round."""
    times = {(c.model, c.framework): {m: [] for m in METHODS} for c in cases}
    start = time.monotonic()
    for r in range(rounds):
        order = METHODS[r % 3:] + METHODS[:r % 3]
        for c in cases:
            for m in order:
                times[c.model, c.framework][m].append(TIMERS[m](c.step.fn, c.step.sync, c.budget(budget)))
                interrupts.checkpoint()
        print(f"round {r + 1}/{rounds} done, {time.monotonic() - start:.0f} s", file=sys.stderr, flush=True)
    return times


def ratio(a: list[float], b: list[float]) -> float:
    return statistics.median(x / y for x, y in zip(a, b))


def table(times: dict[tuple[str, str], dict[str, list[float]]]) -> tuple[list[str], float]:
    rows = [f"{'model':14} {'framework':10} {'harness ms':>11} {'Timer ms':>10} {'bare ms':>10} "
            f"{'harness/Timer':>13} {'harness/bare':>12}"]
    worst = 0.0
    for (model, fw), t in times.items():
        h_t, h_b = ratio(t["harness"], t["timer"]), ratio(t["harness"], t["bare"])
        worst = max(worst, abs(h_t - 1), abs(h_b - 1))
        med = {m: 1e3 * statistics.median(v) for m, v in t.items()}
        rows.append(f"{model:14} {fw:10} {med['harness']:11.4f} {med['timer']:10.4f} {med['bare']:10.4f} "
                    f"{h_t:13.4f} {h_b:12.4f}")
    return rows, worst


def _load(avg: tuple[float, float, float]) -> str:
    return ", ".join(f"{v:.2f}" for v in avg)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--quick", action="store_true", help="a few models, 5 rounds, bench=quick: under a minute")
    p.add_argument("--models", nargs="+", choices=models.available(), metavar="MODEL",
                   help=f"any of {', '.join(models.available())} (default: all; --quick: {', '.join(QUICK_MODELS)})")
    p.add_argument("--batch", type=positive("--batch", "32", int),
                   help=f"batch size (default {BATCH}; matmul_chain keeps its m)")
    p.add_argument("--op", default="inference", choices=OPS)
    p.add_argument("--repeats", type=positive("--repeats", "11", int), help="interleaved rounds of the three methods "
                                                                            "(default 11, --quick 5)")
    p.add_argument("--window", type=positive("--window", "0.25"), default=0.25,
                   help=f"seconds each method samples per round, at least {CALLS} calls (default %(default)s): short "
                        "windows, many rounds, so the drift of a process's steady state hits the three alike")
    p.add_argument("--device", default="cpu", choices=("cpu", "gpu", "auto"))
    p.add_argument("--torch-threads", type=positive("--torch-threads", "1", int),
                   help="torch's intra-op threads (default: torch's own, one per core); "
                   "1 spares torch's OpenMP barriers the stalls another busy process causes")


def run(args: argparse.Namespace) -> int:
    with interrupts.deferred():  # jax and torch run in this process: a signal waits for the next checkpoint
        return agree(args)


def agree(args: argparse.Namespace) -> int:
    """The three methods interleaved on every case; the table, the load meanwhile, the last line."""
    import torch  # as in timer

    if args.torch_threads:
        torch.set_num_threads(args.torch_threads)
    names = args.models or (list(QUICK_MODELS) if args.quick else models.available())
    budget_name, rounds = ("quick", args.repeats or 5) if args.quick else ("default", args.repeats or 11)
    names = [n for n in names if args.op != "training" or models.load(n).trainable]

    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # as in the worker, before jax loads
    load_before, meter_before = os.getloadavg(), meter()
    cases = prepare(names, args.batch, args.op, "fp32", args.device)
    print(f"op {args.op}, fp32, {args.device}; batch " + ", ".join(sorted({f"{c.model} {c.batch}" for c in cases})))
    budget = replace(bench_budget(budget_name), min_time_s=args.window, max_time_s=args.window)
    print(f"harness: timing.measure, bench={budget_name} sampling {args.window:g} s; Timer: blocked_autorange(min_run_time={run_time(budget)} s, "
          f"num_threads={torch.get_num_threads()}); bare: perf_counter blocks; {rounds} interleaved rounds, medians")
    rows, worst = table(interleave(cases, budget, rounds))
    print("\n".join(rows))
    after = meter()
    others = background_cores({k: after[k] - meter_before[k] for k in after})
    print(f"load average (1, 5, 15 min): before {_load(load_before)}, after {_load(os.getloadavg())}; other "
          f"processes used {'unknown' if others is None else f'{others:.2f}'} of {psutil.cpu_count()} cores meanwhile")
    print(f"max |ratio-1| = {worst:.4f}")
    return 0

"""Framework-agnostic timing, run inside the worker: first call, warm-up, block sampling and the adaptive stop;
and a paired worker's bursts. A command that times in its own process (`agree`, `overhead`) stops between two calls
or blocks, outside the timed region, where its Ctrl-C waits (`common.interrupts`; in a worker, nothing is noted)."""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from experiments.common.interrupts import checkpoint
from experiments.common.protocol import Budget, Measurement
from experiments.measure.stats import median_ci

Clock = Callable[[], float]


def target(budget: Budget, between_sd: float | None) -> float:
    """The relative CI half-width at which a process may stop sampling.

    What a user sees is the re-run interval, set by the spread between processes (`between_sd`: the SD of the log
    of process medians, as far as the sweep knows it). Once a process's own CI is a fraction `between_k` of that
    spread, more samples cannot narrow the interval: at 0.5 its own error adds at most 3% to the spread's SD.
    """
    return max(budget.target_rel_ci, budget.between_k * between_sd) if between_sd else budget.target_rel_ci


def ci_ok(samples: list[float], budget: Budget, between_sd: float | None = None) -> bool:
    """True once the CI of the median is narrow enough (relative half-width) to stop."""
    if len(samples) < budget.min_samples:
        return False
    lo, hi = median_ci(samples)
    return (hi - lo) / 2 <= target(budget, between_sd) * float(np.median(samples))


def warm_up(fn: Callable[[], Any], sync: Callable[[Any], None], budget: Budget,
            clock: Clock = time.perf_counter) -> tuple[float, float]:
    """Call until `budget.warmup_s` and `budget.warmup_calls` are both reached; the seconds per call it took, and
    the seconds it took."""
    calls, t0 = 0, clock()
    while True:
        sync(fn())
        calls += 1
        checkpoint()
        elapsed = clock() - t0
        if elapsed >= budget.warmup_s and calls >= budget.warmup_calls:
            return max(elapsed / calls, 1e-9), elapsed


def start(fn: Callable[[], Any], sync: Callable[[Any], None], budget: Budget, clock: Clock = time.perf_counter,
          inspect: Callable[[Any], None] = lambda out: None) -> tuple[float, float, int]:
    """The first call (timed apart; `inspect` sees its output, untimed), then the warm-up, whose estimate of one
    call sets the block length: (first call s, warm-up s, calls per block)."""
    t0 = clock()
    out = fn()
    sync(out)
    first = clock() - t0
    inspect(out)
    del out
    per_call, warmup = warm_up(fn, sync, budget, clock)
    return first, warmup, max(1, math.ceil(budget.min_block_s / per_call - 1e-6))  # tolerance: float noise


def timed_block(fn: Callable[[], Any], sync: Callable[[Any], None], block: int, clock: Clock) -> tuple[float, float]:
    """One sample: `block` calls of `sync(fn())` timed together; (the clock at its end, seconds per call). The
    timed region holds the calls and their syncs only."""
    t0 = clock()
    for _ in range(block):
        sync(fn())
    t1 = clock()
    return t1, (t1 - t0) / block


@dataclass(frozen=True)
class Watch:
    """What looks on while an op is timed, from outside the timed region: `inspect` sees the first output (the worker
    checks which device it lives on); `meter` is read just before and just after the sampling (page faults, CPU
    time, ...), and the Measurement keeps the change."""

    inspect: Callable[[Any], None] = lambda out: None
    meter: Callable[[], dict[str, float]] = dict


def measure(fn: Callable[[], Any], sync: Callable[[Any], None], budget: Budget,
            clock: Clock = time.perf_counter, watch: Watch = Watch(), between_sd: float | None = None) -> Measurement:
    """Time `sync(fn())` per call: first call, warm-up, then blocks until the CI and the budget say stop, `watch`
    looking on. `between_sd`: the spread between processes so far, which sets how narrow this process's CI need be
    (`target`).
    """
    begin = clock()
    first, warmup, block = start(fn, sync, budget, clock, watch.inspect)
    samples: list[float] = []
    before = watch.meter()
    begun = clock()
    while True:
        t1, per_call = timed_block(fn, sync, block, clock)
        samples.append(per_call)
        checkpoint()
        if t1 - begun >= budget.min_time_s and ci_ok(samples, budget, between_sd):
            reason = "ci"
        elif t1 - begun >= budget.max_time_s and len(samples) >= min(budget.min_samples, 3):
            reason = "time"
        elif len(samples) >= budget.max_samples:
            reason = "samples"
        else:
            continue
        after = watch.meter()
        change = {k: after[k] - before[k] for k in after}
        return Measurement(samples, block, first, reason, clock() - begin, change, warmup, t1 - begun)


def burst(fn: Callable[[], Any], sync: Callable[[Any], None], block: int, seconds: float,
          clock: Clock = time.perf_counter) -> list[float]:
    """Blocks of `sync(fn())` for about `seconds` (at least one block), as `measure` samples them: per-call seconds
    of each block. A paired worker's turn (harness/pairs.py): the other worker is stopped meanwhile."""
    samples: list[float] = []
    end = clock() + seconds
    while True:
        t1, per_call = timed_block(fn, sync, block, clock)
        samples.append(per_call)
        if t1 >= end:
            return samples

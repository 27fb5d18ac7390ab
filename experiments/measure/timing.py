"""Framework-agnostic timing, run inside the worker: first call, warm-up, block sampling and the adaptive stop."""
from __future__ import annotations

import math
import time
from typing import Any, Callable

import numpy as np

from experiments.common.protocol import Budget, Measurement
from experiments.measure.stats import median_ci

Clock = Callable[[], float]


def ci_ok(samples: list[float], budget: Budget) -> bool:
    """True once the CI of the median is narrow enough (relative half-width) to stop."""
    if len(samples) < budget.min_samples:
        return False
    lo, hi = median_ci(samples)
    return (hi - lo) / 2 <= budget.target_rel_ci * float(np.median(samples))


def warm_up(fn: Callable[[], Any], sync: Callable[[Any], None], budget: Budget,
            clock: Clock = time.perf_counter) -> float:
    """Call until `budget.warmup_s` and `budget.warmup_calls` are both reached; the seconds per call it took."""
    calls, t0 = 0, clock()
    while True:
        sync(fn())
        calls += 1
        elapsed = clock() - t0
        if elapsed >= budget.warmup_s and calls >= budget.warmup_calls:
            return max(elapsed / calls, 1e-9)


def measure(fn: Callable[[], Any], sync: Callable[[Any], None], budget: Budget,
            clock: Clock = time.perf_counter, inspect: Callable[[Any], None] = lambda out: None,
            meter: Callable[[], dict[str, float]] = dict) -> Measurement:
    """Time `sync(fn())` per call: first call, warm-up, then blocks until the CI and the budget say stop.

    `inspect` sees the first output, untimed (the worker checks which device it lives on). `meter` is read
    just before and just after the sampling (page faults, CPU time, ...); the Measurement keeps the change.
    """
    begin = t0 = clock()
    out = fn()
    sync(out)
    first = clock() - t0
    inspect(out)
    del out

    # Warm-up doubles as the estimate of one call, which sets the block length.
    per_call = warm_up(fn, sync, budget, clock)
    block = max(1, math.ceil(budget.min_block_s / per_call - 1e-6))  # tolerance: float noise in the estimate

    samples: list[float] = []
    before = meter()
    start = clock()
    while True:
        t0 = clock()
        for _ in range(block):
            sync(fn())
        t1 = clock()
        samples.append((t1 - t0) / block)
        if t1 - start >= budget.min_time_s and ci_ok(samples, budget):
            reason = "ci"
        elif t1 - start >= budget.max_time_s and len(samples) >= min(budget.min_samples, 3):
            reason = "time"
        elif len(samples) >= budget.max_samples:
            reason = "samples"
        else:
            continue
        after = meter()
        change = {k: after[k] - before[k] for k in after}
        return Measurement(samples, block, first, reason, clock() - begin, change)

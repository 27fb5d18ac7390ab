"""Framework-agnostic timing: warm-up, block sampling, an adaptive stop and the statistics."""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, fields
from typing import Any, Callable

import numpy as np

Clock = Callable[[], float]


@dataclass
class Budget:
    """How long to measure one op. No defaults here: the bench config group (conf/bench/*.yaml) sets them all."""

    warmup_s: float  # steady-state warm-up after the first call...
    warmup_calls: int  # ...and at least this many calls (caches and allocators settle over a few calls)
    min_samples: int
    max_samples: int
    max_time_s: float  # sampling budget per op, warm-up excluded
    target_rel_ci: float  # stop once the 95% CI of the median is within ±this fraction
    min_block_s: float  # short calls are repeated in blocks at least this long

    @classmethod
    def of(cls, bench: dict) -> "Budget":
        """The budget part of a bench config (which also holds harness keys such as timeout_s)."""
        return cls(**{f.name: bench[f.name] for f in fields(cls)})


@dataclass(frozen=True)
class Measurement:
    """Raw result of timing one op: per-call seconds, one value per block."""

    samples_s: list[float]
    block: int  # calls per sample
    first_call_s: float  # trace/compile plus the first run
    stop_reason: str  # "ci", "time" or "samples"
    elapsed_s: float = 0.0  # wall time of the whole measurement, first call and warm-up included


def _binom_cdf_table(n: int) -> list[float]:
    """P(B <= k) for B ~ Bin(n, 1/2), k = 0..n//2, exact in floats for n <= 1000."""
    pmf, cdf, out = 0.5**n, 0.0, []
    for k in range(n // 2 + 1):
        cdf += pmf
        out.append(cdf)
        pmf *= (n - k) / (k + 1)
    return out


def median_ci_ranks(n: int, confidence: float = 0.95) -> tuple[int, int]:
    """0-based order-statistic indices (lo, hi) whose interval covers the median with >= confidence.

    Distribution-free (binomial) interval; exact up to n=1000, normal approximation above.
    With too few samples for the confidence (n < 6 at 95%) it falls back to (0, n-1).
    """
    alpha = (1 - confidence) / 2
    if n > 1000:
        half = 0.5 * math.sqrt(n) * _z(confidence)
        j = max(int(math.floor(n / 2 - half)), 1)
        return j - 1, n - j
    cdf = _binom_cdf_table(n)
    j = 0  # number of order statistics cut from each side
    while j + 1 <= n // 2 and cdf[j] <= alpha:
        j += 1
    if j == 0:
        return 0, n - 1
    return j - 1, n - j


def _z(confidence: float) -> float:
    from statistics import NormalDist

    return NormalDist().inv_cdf(0.5 + confidence / 2)


def median_ci(samples: np.ndarray | list[float], confidence: float = 0.95) -> tuple[float, float]:
    s = np.sort(np.asarray(samples, dtype=float))
    lo, hi = median_ci_ranks(len(s), confidence)
    return float(s[lo]), float(s[hi])


def ci_ok(samples: list[float], budget: Budget) -> bool:
    """True once the CI of the median is narrow enough (relative half-width) to stop."""
    if len(samples) < budget.min_samples:
        return False
    lo, hi = median_ci(samples)
    return (hi - lo) / 2 <= budget.target_rel_ci * float(np.median(samples))


def measure(fn: Callable[[], Any], sync: Callable[[Any], None], budget: Budget,
            clock: Clock = time.perf_counter, inspect: Callable[[Any], None] = lambda out: None) -> Measurement:
    """Time `sync(fn())` per call: first call, warm-up, then blocks until the CI or the budget says stop.

    `inspect` sees the first output, untimed (the worker checks which device it lives on).
    """
    begin = t0 = clock()
    out = fn()
    sync(out)
    first = clock() - t0
    inspect(out)
    del out

    # Warm-up doubles as the estimate of one call, which sets the block length.
    calls, t0 = 0, clock()
    while True:
        sync(fn())
        calls += 1
        elapsed = clock() - t0
        if elapsed >= budget.warmup_s and calls >= budget.warmup_calls:
            break
    per_call = max(elapsed / calls, 1e-9)
    block = max(1, math.ceil(budget.min_block_s / per_call - 1e-6))  # tolerance: float noise in the estimate

    samples: list[float] = []
    start = clock()
    while True:
        t0 = clock()
        for _ in range(block):
            sync(fn())
        t1 = clock()
        samples.append((t1 - t0) / block)
        if ci_ok(samples, budget):
            reason = "ci"
        elif t1 - start >= budget.max_time_s and len(samples) >= min(budget.min_samples, 3):
            reason = "time"
        elif len(samples) >= budget.max_samples:
            reason = "samples"
        else:
            continue
        return Measurement(samples, block, first, reason, clock() - begin)


@dataclass(frozen=True)
class Stats:
    median_s: float
    p25_s: float
    p75_s: float
    ci95_low_s: float
    ci95_high_s: float
    min_s: float
    mean_s: float
    std_s: float
    n_samples: int
    first_call_s: float
    throughput_samples_per_s: float


STATS = tuple(f.name for f in fields(Stats))  # the per-op metric names: `<op>_<stat>`


def summarize(m: Measurement, batch: int) -> Stats:
    """Statistics over the per-call samples; throughput is batch items per second at the median."""
    s = np.asarray(m.samples_s, dtype=float)
    med = float(np.median(s))
    lo, hi = median_ci(s)
    p25, p75 = (float(v) for v in np.percentile(s, [25, 75]))
    return Stats(
        median_s=med, p25_s=p25, p75_s=p75, ci95_low_s=lo, ci95_high_s=hi,
        min_s=float(s.min()), mean_s=float(s.mean()),
        std_s=float(s.std(ddof=1)) if len(s) > 1 else 0.0,
        n_samples=len(s), first_call_s=m.first_call_s,
        throughput_samples_per_s=batch / med if med > 0 else float("inf"),
    )

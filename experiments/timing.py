"""Framework-agnostic timing: warm-up, block sampling, an adaptive stop and the statistics."""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, fields
from typing import Any, Callable, Sequence

import numpy as np

Clock = Callable[[], float]


@dataclass
class Budget:
    """How long to measure one op. No defaults here: the bench config group (conf/bench/*.yaml) sets them all."""

    warmup_s: float  # steady-state warm-up after the first call...
    warmup_calls: int  # ...and at least this many calls (caches and allocators settle over a few calls)
    min_samples: int
    max_samples: int
    min_time_s: float  # sample at least this long, whatever the CI says: one short window misses slow drift
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
    meter: dict[str, float] = field(default_factory=dict)  # the change of `meter()` over the sampling

    @property
    def calls(self) -> int:
        """Calls timed in the samples (warm-up and first call excluded)."""
        return self.block * len(self.samples_s)


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


def median_of_medians(runs: Sequence[Sequence[float]]) -> float:
    """The point statistic: the median over processes of each process's median (one process: its median)."""
    return float(np.median([np.median(r) for r in runs]))


def boot_medians(runs: Sequence[Sequence[float]], n_boot: int, rng: np.random.Generator) -> np.ndarray:
    """Bootstrap the median of medians, resampling samples within each process and then the processes.

    With one process this is the ordinary bootstrap of the median; with several, process-to-process drift
    widens the CI, as it should: samples from one process are not independent of that process's state.
    """
    arrays = [np.asarray(r, dtype=float) for r in runs]
    per_run = np.stack([np.median(rng.choice(r, (n_boot, len(r))), axis=1) for r in arrays])  # (runs, n_boot)
    picks = rng.integers(len(arrays), size=(n_boot, len(arrays)))
    return np.median(per_run[picks, np.arange(n_boot)[:, None]], axis=1)


def rerun_interval(runs: Sequence[Sequence[float]], confidence: float = 0.95) -> tuple[float, float]:
    """Where the median of medians of a re-run (as many fresh processes) lands, with `confidence`.

    The two-level bootstrap's standard error of the median of medians, times Student's t for n−1 degrees of
    freedom (a handful of processes estimate their spread poorly) and √2 (the re-run varies as much as this
    run). The bootstrap's own percentile interval is a CI of the population's median, narrower still: at 3
    processes it held another run's median 53% of the time here (CPU, processes 10-40% apart).
    """
    from scipy.stats import t

    med = median_of_medians(runs)
    se = float(np.std(boot_medians(runs, 2000, np.random.default_rng(0)), ddof=1))
    half = t.ppf(0.5 + confidence / 2, len(runs) - 1) * math.sqrt(2) * se
    return max(med - half, 0.0), med + half


def summarize(ms: Sequence[Measurement], batch: int) -> Stats:
    """Statistics of one point over its measuring processes; throughput is batch items per second at the median.

    One process: its median, with the distribution-free CI of the median (it knows nothing of other processes).
    Several: the median of the process medians, and `rerun_interval`. Spread, min, mean and std are over all samples.
    """
    runs = [m.samples_s for m in ms]
    s = np.concatenate([np.asarray(r, dtype=float) for r in runs])
    if len(runs) == 1:
        med, (lo, hi) = float(np.median(s)), median_ci(s)
    else:
        med, (lo, hi) = median_of_medians(runs), rerun_interval(runs)
    p25, p75 = (float(v) for v in np.percentile(s, [25, 75]))
    return Stats(
        median_s=med, p25_s=p25, p75_s=p75, ci95_low_s=lo, ci95_high_s=hi,
        min_s=float(s.min()), mean_s=float(s.mean()),
        std_s=float(s.std(ddof=1)) if len(s) > 1 else 0.0,
        n_samples=len(s), first_call_s=float(np.median([m.first_call_s for m in ms])),
        throughput_samples_per_s=batch / med if med > 0 else float("inf"),
    )

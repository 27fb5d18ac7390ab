"""Statistics of samples and of a point's worker processes: the CI of a median, the re-run interval, summaries;
which processes disagree too much to be trusted; and the ratio of a pair of workers measured burst by burst.

Pure functions of numbers (numpy; scipy where a quantile needs it): the worker summarizes its own samples, and the
parent summarizes a point over its processes.
"""
from __future__ import annotations

import math
from statistics import NormalDist
from typing import Sequence

import numpy as np

from experiments.common.protocol import Measurement, Stats

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
    return NormalDist().inv_cdf(0.5 + confidence / 2)


def median_ci(samples: np.ndarray | list[float], confidence: float = 0.95) -> tuple[float, float]:
    s = np.sort(np.asarray(samples, dtype=float))
    lo, hi = median_ci_ranks(len(s), confidence)
    return float(s[lo]), float(s[hi])


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

    On the ratio scale: time is positive and spreads multiplicatively, so the interval is computed on log time
    and is `median ÷ f` to `median × f`, never near zero. f = exp(t × √2 × SE): the two-level bootstrap's standard
    error of the log median of medians, Student's t for n−1 degrees of freedom (a handful of processes estimate
    their spread poorly) and √2 (the re-run varies as much as this run). The bootstrap's own percentile interval
    is a CI of the population's median, narrower still: at 3 processes it held another run's median 53% of the
    time here (CPU, processes 10-40% apart).
    """
    from scipy.stats import t  # scipy takes 0.3 s to import: only the parent merges processes

    med = median_of_medians(runs)
    logs = [np.log(np.asarray(r, dtype=float)) for r in runs]  # the median commutes with log: boot on log time
    se = float(np.std(boot_medians(logs, 2000, np.random.default_rng(0)), ddof=1))
    factor = math.exp(t.ppf(0.5 + confidence / 2, len(runs) - 1) * math.sqrt(2) * se)
    return med / factor, med * factor


def process_spread(runs: Sequence[Sequence[float]]) -> float:
    """The slowest process's median over the fastest one's (1.0 for one process)."""
    medians = [float(np.median(r)) for r in runs]
    return max(medians) / min(medians)


def summarize(ms: Sequence[Measurement], batch: int) -> Stats:
    """Statistics of one point over its measuring processes; throughput is batch items per second at the median.

    One process: its median, with the distribution-free CI of the median (it knows nothing of other processes).
    Several: the median of the process medians, and `rerun_interval`, `bounded` by what the processes measured. Spread, min, mean and std are over all samples.
    """
    runs = [m.samples_s for m in ms]
    s = np.concatenate([np.asarray(r, dtype=float) for r in runs])
    if len(runs) == 1:
        med, (lo, hi) = float(np.median(s)), median_ci(s)
    else:
        med, (lo, hi) = median_of_medians(runs), bounded(rerun_interval(runs), [float(np.median(r)) for r in runs])
    p25, p75 = (float(v) for v in np.percentile(s, [25, 75]))
    return Stats(
        median_s=med, p25_s=p25, p75_s=p75, ci95_low_s=lo, ci95_high_s=hi,
        min_s=float(s.min()), mean_s=float(s.mean()),
        std_s=float(s.std(ddof=1)) if len(s) > 1 else 0.0,
        n_samples=len(s), first_call_s=ms[0].first_call_s,  # the cold one: the first process fills the cache
        throughput_samples_per_s=batch / med if med > 0 else float("inf"), process_spread=process_spread(runs),
        first_call_warm_s=float(np.median([m.first_call_s for m in ms[1:]])) if len(ms) > 1 else None,
    )


def log_spread(medians: Sequence[float]) -> float:
    """The SD of the log of the process medians (0 for one process)."""
    return float(np.std(np.log(medians), ddof=1)) if len(medians) > 1 else 0.0


def bounded(interval: tuple[float, float], medians: Sequence[float]) -> tuple[float, float]:
    """A multiplicative interval (center ÷ f to center × f) with f shrunk until it reaches no further than the
    processes measured by one of their own spreads: the fastest process's median ÷ s, the slowest one's × s,
    s = exp(SD of their log medians).

    The bootstrap behind `rerun_interval` resamples processes: one far process (a median of 88 ms beside four of
    about 1 ms, read while another program ran) gave a point the interval [17.5 µs, 65.5 ms], below anything
    measured. No re-run of these processes reads outside what they read, give or take their spread.
    """
    lo, hi = interval
    center, f, s = math.sqrt(lo * hi), math.sqrt(hi / lo), math.exp(log_spread(medians))
    f = max(1.0, min(f, center * s / min(medians), max(medians) * s / center))
    return center / f, center * f

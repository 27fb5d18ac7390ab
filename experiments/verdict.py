"""Did a change make a point faster or slower? Ratio of medians, its bootstrap CI, and a Mann-Whitney U test."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
from scipy.stats import mannwhitneyu

Runs = Sequence[Sequence[float]]  # per-call samples, one sequence per measuring process


@dataclass(frozen=True)
class Verdict:
    ratio: float  # new / old median of per-process medians: > 1 is slower
    ci_low: float
    ci_high: float
    p_value: float
    verdict: str  # "faster", "slower" or "no change"


def median_of_medians(runs: list[np.ndarray]) -> float:
    """The point statistic: the median over processes of each process's median (one process: its median)."""
    return float(np.median([np.median(r) for r in runs]))


def boot_medians(runs: list[np.ndarray], n_boot: int, rng: np.random.Generator) -> np.ndarray:
    """Bootstrap the median of medians, resampling samples within each process and then the processes.

    With one process this is the ordinary bootstrap of the median; with several, process-to-process drift
    widens the CI, as it should: samples from one process are not independent of that process's state.
    """
    per_run = np.stack([np.median(rng.choice(r, (n_boot, len(r))), axis=1) for r in runs])  # (runs, n_boot)
    picks = rng.integers(len(runs), size=(n_boot, len(runs)))
    return np.median(per_run[picks, np.arange(n_boot)[:, None]], axis=1)


def compare(old: Runs, new: Runs, threshold: float = 0.05, alpha: float = 0.05, n_boot: int = 2000,
            seed: int = 0) -> Verdict:
    """Judge new against old from their raw per-call samples, one array per measuring process.

    Slower (faster) needs all three: the U test on the pooled samples rejects "same distribution" at
    `alpha`, the (1 - alpha) bootstrap CI of the ratio lies wholly above (below) 1, and the ratio itself
    is beyond ±threshold.
    """
    old_runs = [np.asarray(r, dtype=float) for r in old]
    new_runs = [np.asarray(r, dtype=float) for r in new]
    rng = np.random.default_rng(seed)
    ratios = boot_medians(new_runs, n_boot, rng) / boot_medians(old_runs, n_boot, rng)
    lo, hi = np.percentile(ratios, [100 * alpha / 2, 100 * (1 - alpha / 2)])
    ratio = median_of_medians(new_runs) / median_of_medians(old_runs)
    p = float(mannwhitneyu(np.concatenate(new_runs), np.concatenate(old_runs), alternative="two-sided").pvalue)
    if p < alpha and lo > 1 and ratio > 1 + threshold:
        verdict = "slower"
    elif p < alpha and hi < 1 and ratio < 1 - threshold:
        verdict = "faster"
    else:
        verdict = "no change"
    return Verdict(ratio, float(lo), float(hi), p, verdict)

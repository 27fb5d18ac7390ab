"""Did a change make a point faster or slower? Ratio of medians, its bootstrap CI, and a Mann-Whitney U test."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
from scipy.stats import mannwhitneyu

from experiments.measure.stats import boot_medians, median_of_medians

Runs = Sequence[Sequence[float]]  # per-call samples, one sequence per measuring process


@dataclass(frozen=True)
class Verdict:
    ratio: float  # new / old median of per-process medians: > 1 is slower
    ci_low: float
    ci_high: float
    p_value: float
    verdict: str  # "faster", "slower" or "no change"


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

"""Did a change make a point faster or slower? Ratio of medians, its bootstrap CI, and a Mann-Whitney U test."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.stats import mannwhitneyu


@dataclass(frozen=True)
class Verdict:
    ratio: float  # median(new) / median(old): > 1 is slower
    ci_low: float
    ci_high: float
    p_value: float
    verdict: str  # "faster", "slower" or "no change"


def compare(old, new, threshold: float = 0.05, alpha: float = 0.05, n_boot: int = 2000, seed: int = 0) -> Verdict:
    """Judge new against old from their raw per-call samples.

    Slower (faster) needs all three: the U test rejects "same distribution" at `alpha`, the (1 - alpha)
    bootstrap CI of the ratio lies wholly above (below) 1, and the ratio itself is beyond ±threshold.
    """
    old, new = np.asarray(old, dtype=float), np.asarray(new, dtype=float)
    rng = np.random.default_rng(seed)
    boot_old = np.median(rng.choice(old, (n_boot, len(old))), axis=1)
    boot_new = np.median(rng.choice(new, (n_boot, len(new))), axis=1)
    lo, hi = np.percentile(boot_new / boot_old, [100 * alpha / 2, 100 * (1 - alpha / 2)])
    ratio = float(np.median(new) / np.median(old))
    p = float(mannwhitneyu(new, old, alternative="two-sided").pvalue)
    if p < alpha and lo > 1 and ratio > 1 + threshold:
        verdict = "slower"
    elif p < alpha and hi < 1 and ratio < 1 - threshold:
        verdict = "faster"
    else:
        verdict = "no change"
    return Verdict(ratio, float(lo), float(hi), p, verdict)

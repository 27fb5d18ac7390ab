"""What a comparison says (`Verdict`), the rule that calls a change (`changed`), and what several comparisons judged
at once share: Benjamini-Hochberg q-values (multiple testing) and an error rate with its interval. Parent side."""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from experiments.common.config import ALPHA, PAIRED_THRESHOLD, StrEnum  # noqa: F401  (they are the verdicts')

THRESHOLD = 0.05  # the unpaired verdict's


class Verdict(StrEnum):
    """What a comparison of new against old says, in the words tables and the console print."""

    SLOWER = "slower"
    FASTER = "faster"
    SAME = "no change"
    INCONCLUSIVE = "inconclusive"  # paired: neither beyond the threshold nor inside it; more pairs may settle it
    UNKNOWN = "no verdict"  # a side has fewer than two processes (pairs)

    @property
    def changed(self) -> bool:
        return self in (Verdict.SLOWER, Verdict.FASTER)


def changed(ratio: float, q: float, threshold: float, alpha: float) -> Verdict | None:
    """slower or faster where q < alpha and the ratio lies beyond 1 ± threshold; else None."""
    if q < alpha and ratio > 1 + threshold:
        return Verdict.SLOWER
    if q < alpha and ratio < 1 - threshold:
        return Verdict.FASTER
    return None


def rate(k: int, n: int) -> str:
    """k of n as a share with its exact (Clopper-Pearson) 95% interval: how the self-checks say an error rate."""
    if n == 0:
        return "no comparisons"
    from scipy.stats import binomtest  # as in welch

    lo, hi = binomtest(k, n).proportion_ci(0.95)
    return f"{k} of {n} = {k / n:.1%} [{lo:.1%}, {hi:.1%}]"


def q_values(ps: Sequence[float]) -> np.ndarray:
    """Benjamini-Hochberg q-values of the p-values judged together (nan stays nan: no test)."""
    ps = np.asarray(ps, dtype=float)
    qs = np.full(len(ps), math.nan)
    known = ~np.isnan(ps)
    if known.any():
        from scipy import stats  # as in welch
        qs[known] = stats.false_discovery_control(ps[known])
    return qs

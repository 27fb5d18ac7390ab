"""The sequential looks: a paired cell is judged again after each trial it gets while unsettled, each look at the
level that keeps `alpha` over all of them (Pocock's boundary for Student's t). Parent side."""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from experiments.stats.verdicts import ALPHA


@dataclass(frozen=True)
class Looks:
    """When a cell's trials are judged: first at `first` trials, then again after each further trial while the cell
    is unsettled, up to `last` (bench.processes and bench.max_processes)."""

    first: int = 1
    last: int = 1

    def level(self, alpha: float = ALPHA) -> float:
        """The two-sided level each look is judged at, so that all of them together keep `alpha`."""
        return look_level(max(self.first, 2), max(self.last, self.first, 2), alpha)


# Draws of Gaussian A/A cells that set a schedule's per-look level: its Monte-Carlo error moves the level's
# false-alarm rate by about ±0.1% (binomial SD at 5%), seeded, so every process computes the same level.
LOOK_DRAWS = 100_000
# Why Pocock's boundary (simulated 2026-12-07, the sweep's own rule over looks 5..12, 20,000 cells a row, trials
# spread 4%): judged at 5% per look, 6.7% of A/A cells ended slower or faster (14.0% at an 8% spread); Bonferroni's
# 5%/8 per look, 1.5% (2.3%), finding a planted 5% in 82% of cells; this level (1.5% per look), 3.1% (5.1%), finding
# it in 91%. Heavy-tailed trials (Student's t, 3 df) only lower each rate. docs/comparing.md#looking-again.


@functools.lru_cache(maxsize=None)
def look_level(first: int, last: int, alpha: float) -> float:
    """Pocock's boundary for Student's t: the per-look level at which a cell judged after `first`, `first` + 1, ...,
    `last` trials has its interval exclude the true ratio at any look in `alpha` of Gaussian cells. The interval then
    holds the truth at every look at once (a repeated confidence interval), so no rule for adding trials raises
    its false alarms; only the draws where a look rejects count, so the level is the `alpha` quantile of each draw's
    smallest p-value over the looks. Looks 5..12 (the default bench): 0.015."""
    if last <= first:
        return alpha
    from scipy.special import stdtr  # as in paired_t

    rng = np.random.default_rng(0)
    total, squares, smallest = np.zeros(LOOK_DRAWS), np.zeros(LOOK_DRAWS), np.ones(LOOK_DRAWS)
    for n in range(1, last + 1):
        x = rng.standard_normal(LOOK_DRAWS)
        total, squares = total + x, squares + x * x
        if n >= first:
            mean = total / n
            se = np.sqrt((squares - n * mean * mean) / (n - 1) / n)
            smallest = np.minimum(smallest, 2 * stdtr(n - 1, -np.abs(mean) / se))
    return float(np.quantile(smallest, alpha))

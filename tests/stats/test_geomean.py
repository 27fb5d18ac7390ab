"""The geometric mean over a paired sweep's cells with its interval from their trials, on cells whose answer is
known."""
import math

import numpy as np
import pytest
from scipy import stats

from experiments.stats.geomean import Evidence, geomean


def cell(group: str, trials: list[int], log_ratios, bs: int = 2) -> Evidence:
    return Evidence(group, "lenet", "inference", bs, "B", "A", trials, [float(x) for x in log_ratios])


def test_one_groups_geometric_mean_is_students_t_over_its_trial_means():
    """The cells of one group share their trials' processes: the interval comes from the spread of the trial means
    (scipy's one-sample t interval on them), over the trials that measured every cell (trial 5 missed one)."""
    rng = np.random.default_rng(8)
    bias = rng.normal(0, 0.03, 6)  # each trial's processes move all of its cells alike
    cells = [cell("g", list(range(6)), level + bias + rng.normal(0, 0.01, 6), bs)
             for level, bs in ((0.1, 2), (0.3, 8), (-0.1, 32))]
    cells.append(cell("g", list(range(5)), 0.2 + bias[:5], 128))
    means = np.mean([c.log_ratios[:5] for c in cells], axis=0)
    ci = stats.ttest_1samp(means, 0).confidence_interval(0.95)
    r, lo, hi = geomean(cells)
    assert r == pytest.approx(math.exp(means.mean())) and (lo, hi) == pytest.approx((math.exp(ci.low),
                                                                                      math.exp(ci.high)))


def test_independent_groups_combine_weighted_by_their_cells():
    """Two groups with the same spread of trial means and as many trials: Welch-Satterthwaite gives 2(n - 1) degrees
    of freedom and the variance halves; with unequal groups, each weighs by its cells."""
    x = np.array([0.05, 0.12, 0.08, 0.1, 0.02])
    r, lo, hi = geomean([cell("g1", list(range(5)), x), cell("g2", list(range(5)), x + 0.1, 8)])
    half = stats.t.ppf(0.975, 2 * (5 - 1)) * math.sqrt(x.var(ddof=1) / 5 / 2)
    assert math.log(r) == pytest.approx(x.mean() + 0.05)
    assert (math.log(lo), math.log(hi)) == pytest.approx((x.mean() + 0.05 - half, x.mean() + 0.05 + half))
    y = np.array([0.3, 0.2, 0.25])  # one cell, three trials, beside two cells of five
    r, lo, hi = geomean([cell("g1", list(range(5)), x), cell("g1", list(range(5)), x + 0.02, 8),
                         cell("g2", [0, 1, 2], y, 32)])
    w = np.array([2, 1]) / 3
    parts = w ** 2 * np.array([x.var(ddof=1) / 5, y.var(ddof=1) / 3])
    df = parts.sum() ** 2 / (parts[0] ** 2 / 4 + parts[1] ** 2 / 2)
    d = w @ [x.mean() + 0.01, y.mean()]
    half = stats.t.ppf(0.975, df) * math.sqrt(parts.sum())
    assert (math.log(r), math.log(lo), math.log(hi)) == pytest.approx((d, d - half, d + half))


def test_a_group_with_one_trial_gives_no_interval():
    r, lo, hi = geomean([cell("g", [0], [0.1]), cell("g", [0], [0.3], 8)])
    assert r == pytest.approx(math.exp(0.2)) and math.isnan(lo) and math.isnan(hi)
    r, lo, hi = geomean([cell("g1", [0], [0.1]), cell("g2", [0, 1, 2], [0.1, 0.2, 0.3], 8)])
    assert r == pytest.approx(math.exp(0.15)) and math.isnan(lo) and math.isnan(hi)  # one group's unknown spread
    assert all(math.isnan(v) for v in geomean([cell("g", [0], [0.1]), cell("g", [1], [0.2], 8)]))  # no trial in common
    assert geomean([cell("g", [0, 1], [0.1, 0.1])]) == pytest.approx((math.exp(0.1),) * 3)  # no spread at all


def test_a_cells_evidence_reads_back_typed_and_an_older_sweeps_too():
    """evidence.json holds each cell's judgement and reads back to it, its verdict a Verdict; an older sweep's file
    (a plain verdict and interval) reads as a judgement of those, the numbers it did not keep unknown."""
    from experiments.stats.paired import judge_pairs
    from experiments.stats.verdicts import Verdict
    from experiments.sweep.paired_engine import Answer

    (c,) = judge_pairs([[0.05, 0.07, 0.06, 0.08, 0.04]], 0.03, 0.05)
    e = Evidence("g", "lenet", "inference", 2, "B", "A", [0, 1, 2, 3, 4], [0.05, 0.07, 0.06, 0.08, 0.04], c)
    back = Answer.from_json(Answer([e]).to_json()).cells[0]
    assert back.verdict is Verdict.SLOWER and back.judged.ci_low == pytest.approx(c.ci_low)
    old = ('{"cells": [{"group": "g", "model": "lenet", "op": "inference", "batch_size": 2, "variant": "B", '
           '"baseline": "A", "trials": [0, 1], "log_ratios": [0.1, 0.1], "verdict": "slower", "set_aside": [], '
           '"interval": [1.05, 1.16]}]}')
    (was,) = Answer.from_json(old).cells
    assert was.verdict is Verdict.SLOWER and (was.judged.ci_low, was.judged.ci_high) == (1.05, 1.16)
    assert was.judged.ratio == pytest.approx(math.exp(0.1)) and math.isnan(was.judged.p_value)

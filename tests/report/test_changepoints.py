"""Change points (ruptures' Pelt with the noise-scaled penalty) and the regressions table, on series with known
steps, and the false-alarm rate of the whole rule on flat series."""
import numpy as np
import pandas as pd
import pytest

from experiments.report import regressions
from experiments.stats import changepoints


def groups(rng, levels, k=5, spread=0.05):
    """One list of k per-process medians per value, at these levels."""
    return [list(level * rng.lognormal(0.0, spread, k)) for level in levels]


def test_the_noise_of_a_median_of_processes():
    assert changepoints.median_sd(1) == 1.0
    assert changepoints.median_sd(2) == pytest.approx(0.5**0.5)
    assert changepoints.median_sd(5) == pytest.approx(0.536, abs=0.01)


@pytest.mark.parametrize("levels,expected", [
    ([1.0] * 8, []),
    ([1.0] * 5 + [1.3] * 3, [5]),
    ([1.0] * 7 + [1.3], [7]),  # a step at the newest value
    ([1.0, 1.3], [1]),
    ([1.0] * 3 + [1.5] * 3 + [1.1] * 3, [3, 6]),
    ([1.0, 1.0, 0.7, 0.7], [2]),
])
def test_steps_are_found_where_they_are(levels, expected):
    assert changepoints.breaks(groups(np.random.default_rng(0), levels, spread=0.03)) == expected


def test_one_process_per_value_and_a_short_series_is_not_judged():
    assert changepoints.breaks([[1.0], [1.5], [1.0]]) == []


def series(values, gs, op="inference"):
    """regressions.series rows for one point."""
    return pd.DataFrame([{"model": "lenet", "op": op, "batch_size": 32, "variant": "jax-jit fp32", "device": "cpu",
                          "value": v, "position": i, "runs": 1, "processes": len(g), "median_s": float(np.median(g)),
                          "process_medians_s": g, "run_ids": f"r{i}"} for i, (v, g) in enumerate(zip(values, gs))])


def test_the_regressions_table_names_where_before_after_and_the_ratio():
    values = [f"1.{i}" for i in range(8)]
    s = series(values, groups(np.random.default_rng(1), [20e-3] * 5 + [26e-3] * 3))
    r = regressions.regressions(s)
    assert len(r) == 1
    row = r.iloc[0]
    assert (row["where"], row["before"], row["after"], row["verdict"]) == ("1.5", "1.0…1.4", "1.5…1.7", "slower")
    assert row["ci95_low"] <= 1.3 <= row["ci95_high"] and (row["processes_before"], row["processes_after"]) == (25, 15)
    assert "▲ " in regressions.overview(s, r, values)
    assert "1.0…1.4 → 1.5…1.7" in regressions.regressions_markdown(r)


@pytest.mark.parametrize("n", [2, 3, pytest.param(5, marks=pytest.mark.slow), pytest.param(8, marks=pytest.mark.slow)])
def test_flat_series_rarely_get_a_change(n):
    """400 flat series of n values, 5 processes each (spread 10%): a confirmed change in at most ~5% of them
    (simulated: 3-5% for n < 5, where only the processes tell the noise; about 1% from 5 values on)."""
    rng = np.random.default_rng(n)
    frames = [series([str(i) for i in range(n)], groups(rng, [1e-3] * n, spread=0.1)).assign(model=f"m{t}")
              for t in range(400)]
    hits = sum(not regressions.regressions(f).empty for f in frames)
    assert hits <= 36, hits  # 5% of 400 is 20; 36 is beyond it by four binomial standard deviations

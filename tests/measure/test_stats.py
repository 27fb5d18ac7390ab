"""Statistics of samples and of a point's processes: the CI of a median, the re-run interval, the summary."""
import numpy as np
import pytest
from scipy import stats

from experiments.common.protocol import Measurement
from experiments.measure.stats import median_ci_ranks, summarize


@pytest.mark.parametrize("n", [6, 7, 10, 25, 50, 99, 100, 500, 1000])
def test_median_ci_ranks_are_the_tightest_exact_binomial_interval(n):
    lo, hi = median_ci_ranks(n)
    assert hi == n - 1 - lo
    coverage = 1 - 2 * stats.binom.cdf(lo, n, 0.5)
    assert coverage >= 0.95
    # one rank tighter on each side would drop below 95%
    assert 1 - 2 * stats.binom.cdf(lo + 1, n, 0.5) < 0.95


def test_median_ci_large_n_normal_approximation_close_to_exact():
    n = 5000
    lo, _ = median_ci_ranks(n)
    exact = int(stats.binom.ppf(0.025, n, 0.5))
    assert abs(lo - exact) <= 2


def test_too_few_samples_use_the_full_range():
    assert median_ci_ranks(5) == (0, 4)


def test_summary_statistics_match_numpy():
    samples = [0.003, 0.001, 0.002, 0.004, 0.010, 0.002, 0.003, 0.0025, 0.0031, 0.0029]
    s = summarize([Measurement(samples, 1, 0.5, "ci")], batch=32)
    a = np.array(samples)
    assert s.median_s == pytest.approx(np.median(a))
    assert s.p25_s == pytest.approx(np.percentile(a, 25))
    assert s.p75_s == pytest.approx(np.percentile(a, 75))
    assert s.min_s == 0.001 and s.mean_s == pytest.approx(a.mean()) and s.std_s == pytest.approx(a.std(ddof=1))
    lo, hi = median_ci_ranks(len(a))
    assert (s.ci95_low_s, s.ci95_high_s) == (sorted(a)[lo], sorted(a)[hi])
    assert s.n_samples == 10 and s.first_call_s == 0.5
    assert s.throughput_samples_per_s == pytest.approx(32 / np.median(a))


def test_several_processes_widen_the_ci_with_their_drift():
    """One process: the CI of its median. Three at different levels: the median of medians, and a CI that
    spans the drift between them (the two-level bootstrap), not the tight within-process one."""
    rng = np.random.default_rng(0)
    procs = [Measurement(list(level * rng.lognormal(0, 0.01, 200)), 1, 0.1, "ci") for level in (1.0, 1.2, 1.5)]
    one = summarize(procs[:1], 1)
    many = summarize(procs, 1)
    assert one.ci95_high_s - one.ci95_low_s < 0.01
    assert many.median_s == pytest.approx(np.median([np.median(p.samples_s) for p in procs]))
    assert many.ci95_low_s < 1.05 and many.ci95_high_s > 1.4
    assert many.n_samples == 600


def test_the_rerun_interval_is_multiplicative_and_never_near_zero():
    """Processes 0.25-0.75 ms apart: the interval is median ÷ f to median × f on log time, not a symmetric one in
    seconds that a wide spread clips at zero."""
    rng = np.random.default_rng(1)
    procs = [Measurement(list(level * rng.lognormal(0, 0.02, 100)), 1, 0.1, "ci")
             for level in (0.25e-3, 0.40e-3, 0.38e-3, 0.746e-3, 0.30e-3)]
    s = summarize(procs, 2)
    assert s.ci95_low_s > 0.1e-3
    assert s.median_s / s.ci95_low_s == pytest.approx(s.ci95_high_s / s.median_s)
    assert s.process_spread == pytest.approx(np.median(procs[3].samples_s) / np.median(procs[0].samples_s))


def test_the_cold_first_call_is_the_first_process_one():
    """With the compile cache, the first process compiles and the later ones load: first_call_s is the cold one,
    first_call_warm_s the median of the later ones."""
    procs = [Measurement([1e-3] * 20, 1, first, "ci") for first in (2.5, 0.3, 0.2, 0.4)]
    s = summarize(procs, 1)
    assert s.first_call_s == 2.5 and s.first_call_warm_s == pytest.approx(0.3)
    assert summarize(procs[:1], 1).first_call_warm_s is None

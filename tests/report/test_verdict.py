"""The A/B verdict on synthetic samples with a known truth."""
import numpy as np
import pytest

from experiments.report.verdict import compare


def samples(rng, median, n=60, spread=0.03):
    """Right-skewed timing noise around a median, like real per-call samples."""
    return median * rng.lognormal(0.0, spread, n)


def test_known_ten_percent_slowdown_is_detected():
    rng = np.random.default_rng(0)
    v = compare([samples(rng, 1e-3)], [samples(rng, 1.1e-3)])
    assert v.verdict == "slower" and v.p_value < 0.05
    assert v.ci_low <= 1.10 <= v.ci_high


def test_speedup_is_detected():
    rng = np.random.default_rng(1)
    assert compare([samples(rng, 1e-3)], [samples(rng, 0.8e-3)]).verdict == "faster"


def test_identical_distributions_give_no_change():
    rng = np.random.default_rng(2)
    verdicts = [compare([samples(rng, 1e-3)], [samples(rng, 1e-3)]).verdict for _ in range(20)]
    assert verdicts.count("no change") == 20


def test_significant_but_small_change_is_below_threshold():
    rng = np.random.default_rng(3)
    v = compare([samples(rng, 1e-3, n=2000, spread=0.01)], [samples(rng, 1.02e-3, n=2000, spread=0.01)])
    assert v.p_value < 1e-6 and v.ci_low > 1  # real, but 2% < the 5% threshold
    assert v.verdict == "no change"


def test_ci_covers_the_true_ratio():
    rng = np.random.default_rng(4)
    covered = 0
    for _ in range(40):
        v = compare([samples(rng, 1e-3)], [samples(rng, 1.1e-3)], n_boot=1000)
        covered += v.ci_low <= 1.1 <= v.ci_high
    assert covered >= 34  # a 95% interval: about 38 of 40, allowing for bootstrap and sampling slack


@pytest.mark.parametrize("n", [6, 10])
def test_few_samples_are_not_overclaimed(n):
    rng = np.random.default_rng(5)
    v = compare([samples(rng, 1e-3, n=n, spread=0.2)], [samples(rng, 1.1e-3, n=n, spread=0.2)])
    assert v.verdict == "no change"  # 10% inside 20% noise with a handful of samples: no verdict


def processes(rng, median, k, drift=0.15):
    """k measuring processes, each with its own steady state (process-to-process drift), as seen on these hosts."""
    return [samples(rng, median * rng.lognormal(0.0, drift)) for _ in range(k)]


def test_replicate_processes_keep_drift_from_becoming_a_verdict():
    """One process per side: drift alone reads as a change. Replicates: the CI widens and says no change."""
    rng = np.random.default_rng(6)
    single = [compare(processes(rng, 1e-3, 1), processes(rng, 1e-3, 1)).verdict for _ in range(20)]
    replicated = [compare(processes(rng, 1e-3, 5), processes(rng, 1e-3, 5), n_boot=500).verdict for _ in range(20)]
    assert single.count("no change") <= 10  # tight within-process CIs, different steady states
    assert replicated.count("no change") >= 18


def test_replicates_still_detect_a_real_slowdown():
    rng = np.random.default_rng(7)
    v = compare(processes(rng, 1e-3, 5, drift=0.02), processes(rng, 1.3e-3, 5, drift=0.02), n_boot=500)
    assert v.verdict == "slower" and v.ci_low <= 1.3 <= v.ci_high

"""A paired trial's log ratio from its rounds' bursts, on bursts whose answer is known: robust to single slow bursts
and to load that comes or goes within the trial."""
import math

import numpy as np
import pytest

from experiments.stats import ratios


def bursts(level: float, rounds: int = 30, per: int = 20, seed: int = 0, sd: float = 0.02) -> list[list[float]]:
    rng = np.random.default_rng(seed)
    return [list(level * rng.lognormal(0, sd, per)) for _ in range(rounds)]


def test_a_pairs_ratio_is_the_ratio_of_the_medians_of_all_its_bursts():
    a = bursts(1e-3)
    b = [[x * 1.05 for x in burst] for burst in a]
    assert ratios.pair_log_ratio(a, b) == pytest.approx(math.log(1.05))
    assert ratios.round_log_ratios(a, b) == pytest.approx([math.log(1.05)] * 30)


def test_single_slow_bursts_move_the_mean_of_round_ratios_but_not_the_pairs_ratio():
    """Two of 30 of B's bursts read 100× slow (a preempted OpenMP thread): the mean of per-round ratios moves by
    about 6.6×; the pair's ratio (the median of the round log ratios) and the ratio of all bursts' medians do not."""
    a, b = bursts(1e-3, seed=1), bursts(1e-3, seed=2)
    b[3] = [x * 100 for x in b[3]]
    b[17] = [x * 100 for x in b[17]]
    assert np.mean(np.exp(ratios.round_log_ratios(a, b))) > 5
    assert abs(ratios.pair_log_ratio(a, b)) < 0.02 and abs(ratios.pooled_log_ratio(a, b)) < 0.02


def test_load_that_comes_within_a_pair_moves_the_pooled_medians_but_not_the_round_ratios():
    """40 rounds, B 5% slower; the machine turns twice as slow from round 21 on, and in round 21 between A's burst
    and B's. Each round's ratio but that one sees 1.05; the median of all of A's samples (21 fast rounds, 19 slow)
    against all of B's (20 and 20) lands between the two levels."""
    level = [1e-3] * 20 + [2e-3] * 20
    a = [[x * level[r] / 1e-3 for x in burst] for r, burst in enumerate(bursts(1e-3, rounds=40, seed=3))]
    a[20] = bursts(1e-3, rounds=1, seed=4)[0]  # round 21: A ran before the load came
    b = [[x * 1.05 * level[r] / 1e-3 for x in burst] for r, burst in enumerate(bursts(1e-3, rounds=40, seed=5))]
    assert ratios.pair_log_ratio(a, b) == pytest.approx(math.log(1.05), abs=0.005)
    assert ratios.pooled_log_ratio(a, b) > math.log(1.3)


def test_hodges_lehmann_is_the_median_of_walsh_averages():
    assert ratios.hodges_lehmann([1, 2, 3]) == 2  # 1, 1.5, 2, 2, 2.5, 3
    assert ratios.hodges_lehmann([0, 0, 0, 10]) == 0  # 0 ×6, 5 ×3, 10
    assert ratios.hodges_lehmann([5.0]) == 5.0

"""Statistics of paired comparisons and of processes under load, on inputs whose answer is known: a pair's ratio, the
paired verdict (with Benjamini-Hochberg and its A/A and planted rates), intervals bounded by what the processes
measured, which processes to re-measure, oversubscribed threads, and a burst's timing with a fake clock."""
import math

import numpy as np
import pytest
from scipy import stats as scipy_stats

from experiments.common.protocol import Measurement
from experiments.measure import stats, timing
from experiments.measure.meter import oversubscription
from experiments.measure.verdict import Looks, Verdict, judge_pairs, look_level, paired_t


def bursts(level: float, rounds: int = 30, per: int = 20, seed: int = 0, sd: float = 0.02) -> list[list[float]]:
    rng = np.random.default_rng(seed)
    return [list(level * rng.lognormal(0, sd, per)) for _ in range(rounds)]


def test_a_pairs_ratio_is_the_ratio_of_the_medians_of_all_its_bursts():
    a = bursts(1e-3)
    b = [[x * 1.05 for x in burst] for burst in a]
    assert stats.pair_log_ratio(a, b) == pytest.approx(math.log(1.05))
    assert stats.round_log_ratios(a, b) == pytest.approx([math.log(1.05)] * 30)


def test_single_slow_bursts_move_the_mean_of_round_ratios_but_not_the_pairs_ratio():
    """Two of 30 of B's bursts read 100× slow (a preempted OpenMP thread): the mean of per-round ratios moves by
    about 6.6×; the pair's ratio (the median of the round log ratios) and the ratio of all bursts' medians do not."""
    a, b = bursts(1e-3, seed=1), bursts(1e-3, seed=2)
    b[3] = [x * 100 for x in b[3]]
    b[17] = [x * 100 for x in b[17]]
    assert np.mean(np.exp(stats.round_log_ratios(a, b))) > 5
    assert abs(stats.pair_log_ratio(a, b)) < 0.02 and abs(stats.pooled_log_ratio(a, b)) < 0.02


def test_load_that_comes_within_a_pair_moves_the_pooled_medians_but_not_the_round_ratios():
    """40 rounds, B 5% slower; the machine turns twice as slow from round 21 on, and in round 21 between A's burst
    and B's. Each round's ratio but that one sees 1.05; the median of all of A's samples (21 fast rounds, 19 slow)
    against all of B's (20 and 20) lands between the two levels."""
    level = [1e-3] * 20 + [2e-3] * 20
    a = [[x * level[r] / 1e-3 for x in burst] for r, burst in enumerate(bursts(1e-3, rounds=40, seed=3))]
    a[20] = bursts(1e-3, rounds=1, seed=4)[0]  # round 21: A ran before the load came
    b = [[x * 1.05 * level[r] / 1e-3 for x in burst] for r, burst in enumerate(bursts(1e-3, rounds=40, seed=5))]
    assert stats.pair_log_ratio(a, b) == pytest.approx(math.log(1.05), abs=0.005)
    assert stats.pooled_log_ratio(a, b) > math.log(1.3)


def test_hodges_lehmann_is_the_median_of_walsh_averages():
    assert stats.hodges_lehmann([1, 2, 3]) == 2  # 1, 1.5, 2, 2, 2.5, 3
    assert stats.hodges_lehmann([0, 0, 0, 10]) == 0  # 0 ×6, 5 ×3, 10
    assert stats.hodges_lehmann([5.0]) == 5.0


def test_paired_t_is_scipys_one_sample_test_and_interval_on_the_logs():
    x = [0.04, 0.06, 0.05, 0.03, 0.07, 0.045]
    ratio, lo, hi, p = paired_t(x)
    t = scipy_stats.ttest_1samp(x, 0)
    ci = t.confidence_interval(0.95)
    assert p == pytest.approx(t.pvalue)
    assert (lo, hi) == pytest.approx((math.exp(ci.low), math.exp(ci.high)))
    assert ratio == pytest.approx(math.exp(np.mean(x)))
    assert math.isnan(paired_t([0.1])[1])


def test_paired_verdicts_say_what_the_interval_says():
    """A planted 5% beyond a 2% threshold is slower; 5% faster is faster; a 0.5% change measured tightly is no
    change (the whole interval inside ±2%); a wide interval is inconclusive; one pair is no verdict."""
    rng = np.random.default_rng(0)
    tight = lambda center: list(center + rng.normal(0, 0.005, 8))  # noqa: E731
    verdicts = judge_pairs([tight(math.log(1.05)), tight(math.log(0.95)), tight(0.005),
                            list(rng.normal(0, 0.08, 4)), [0.3]], threshold=0.02)
    assert [v.verdict for v in verdicts] == [Verdict.SLOWER, Verdict.FASTER, Verdict.SAME, Verdict.INCONCLUSIVE, Verdict.UNKNOWN]
    assert [v.conclusive for v in verdicts] == [True, True, True, False, False]
    assert verdicts[0].ci_low < 1.05 < verdicts[0].ci_high and verdicts[0].pairs == 8


def test_a_significant_change_inside_the_threshold_that_the_interval_crosses_is_inconclusive():
    """ratio 1.015 with an interval reaching past 1.02: neither beyond the threshold nor inside it."""
    x = list(math.log(1.015) + np.random.default_rng(1).normal(0, 0.008, 6))
    (v,) = judge_pairs([x], threshold=0.02)
    assert v.q_value < 0.05 and v.ci_high > 1.02 and v.verdict == Verdict.INCONCLUSIVE


def test_the_points_judged_together_share_one_benjamini_hochberg_family():
    """One point with p just under 0.05 is slower alone; among 19 points with no change it is not a discovery."""
    x = [0.05, 0.02, 0.09, 0.03, -0.01, 0.06]
    (alone,) = judge_pairs([x])
    assert alone.p_value < 0.05 and alone.verdict == Verdict.SLOWER
    flat = [list(np.random.default_rng(i).normal(0, 0.005, 6)) for i in range(19)]
    among = judge_pairs([x, *flat])[0]
    assert among.p_value == alone.p_value and among.q_value > alone.q_value and among.verdict != Verdict.SLOWER


@pytest.mark.parametrize("pairs,sd", [(6, 0.04), (12, 0.03)])
def test_a_a_false_alarms_stay_below_five_percent(pairs, sd):
    """Pairs' log ratios with no change, at this machine's between-pair spreads (2-4%), judged 12 points at a time (a
    README sweep's op-points): slower or faster in at most 5% of 3,600 comparisons."""
    rng = np.random.default_rng(pairs)
    verdicts = [v.verdict for _ in range(300) for v in judge_pairs([list(rng.normal(0, sd, pairs)) for _ in range(12)])]
    alarms = sum(v in (Verdict.SLOWER, Verdict.FASTER) for v in verdicts) / len(verdicts)
    assert alarms <= 0.05, alarms


DEFAULT_LOOKS = Looks(5, 12)  # bench=default: 5 trials, then one more at a time while unsettled, up to 12


def sequential(effect: float, sd: float, cells: int, looks: Looks | None, seed: int = 0) -> list[Verdict]:
    """Each cell judged as a sweep judges it: after looks.first trials, then after each further trial while it is
    unsettled (neither slower, faster nor no change, or its plain 95% interval wider than ±10%), up to looks.last;
    its last verdict kept. looks None: every look at 5%, as before the looks were counted."""
    rng, out = np.random.default_rng(seed), []
    first, last = DEFAULT_LOOKS.first, DEFAULT_LOOKS.last
    for x in rng.normal(math.log(effect), sd, (cells, last)):
        for n in range(first, last + 1):
            (v,) = judge_pairs([list(x[:n])], 0.03, 0.05, *([looks] if looks else []))
            if v.conclusive and v.precision <= 0.1:
                break
        out.append(v.verdict)
    return out


def test_the_level_of_each_look_keeps_alpha_over_every_look():
    """Gaussian A/A trials judged by Student's t after 5, 6, ..., 12 of them: at 5% per look, 15% of cells have an
    interval that misses the truth at some look; at `look_level` (Pocock's boundary), 5% (40,000 cells, drawn apart
    from the level's own draws: Monte-Carlo SD 0.11%)."""
    from scipy.special import stdtrit

    level = look_level(5, 12, 0.05)
    assert 0.013 < level < 0.017 and look_level(5, 5, 0.05) == 0.05 and Looks(1, 1).level() == 0.05
    z = np.random.default_rng(7).standard_normal((40_000, 12))
    missed = {0.05: np.zeros(len(z), bool), level: np.zeros(len(z), bool)}
    for n in range(5, 13):
        t = np.abs(z[:, :n].mean(1)) / (z[:, :n].std(1, ddof=1) / math.sqrt(n))
        for a in missed:
            missed[a] |= t > stdtrit(n - 1, 1 - a / 2)
    assert missed[0.05].mean() > 0.12 and abs(missed[level].mean() - 0.05) < 0.004


@pytest.mark.parametrize("sd", [0.04, 0.08])
def test_a_cell_that_gets_more_trials_while_unsettled_keeps_its_false_alarms_at_alpha(sd):
    """A/A trials spread 4% and 8% (this machine's noisier cells), judged at every look until settled: at 5% per
    look (before) 8% and 14% of cells end slower or faster; at the look level, within 5% and its Monte-Carlo error
    (600 cells: 2 SD is 1.8%)."""
    alarms = lambda looks: np.mean([v.changed for v in sequential(1.0, sd, 600, looks, seed=int(sd * 100))])  # noqa
    assert alarms(DEFAULT_LOOKS) <= 0.05 + 2 * math.sqrt(0.05 * 0.95 / 600)
    if sd == 0.08:
        assert alarms(None) > 0.08


def test_a_planted_five_percent_is_found_at_every_look_level():
    """5% slower, trials spread 3%: found (slower) in at least 90% of 300 cells, judged look by look."""
    found = np.mean([v == Verdict.SLOWER for v in sequential(1.05, 0.03, 300, DEFAULT_LOOKS, seed=5)])
    assert found >= 0.9, found


def test_the_trial_budget_reads_the_plain_interval_and_the_verdict_the_looks():
    """A 40% slowdown whose five trials spread 7%: its look's interval (98.5%) reaches ±13%, its plain 95% one
    ±9%, within bench=default's ±10% target: slower, and no more trials (as before the looks were counted)."""
    x = list(math.log(1.4) + np.array([-0.07, 0.0, 0.07, 0.035, -0.035]) * 1.26)
    (v,) = judge_pairs([x], looks=DEFAULT_LOOKS)
    from scipy.special import stdtrit

    assert v.verdict == Verdict.SLOWER and math.sqrt(v.ci_high / v.ci_low) - 1 > 0.1
    assert v.precision == pytest.approx(math.expm1(stdtrit(4, 0.975) * np.std(x, ddof=1) / math.sqrt(5)))
    assert v.precision < 0.1 and judge_pairs([x[:1]])[0].precision == math.inf


def test_swapped_sides_give_the_inverse_ratio_interval_and_verdict():
    x = list(np.random.default_rng(3).normal(math.log(1.06), 0.01, 6))
    (ab,), (ba,) = judge_pairs([x], looks=DEFAULT_LOOKS), judge_pairs([[-v for v in x]], looks=DEFAULT_LOOKS)
    assert ab.ratio == pytest.approx(1 / ba.ratio)
    assert (ab.ci_low, ab.ci_high) == pytest.approx((1 / ba.ci_high, 1 / ba.ci_low))
    assert (ab.verdict, ba.verdict) == (Verdict.SLOWER, Verdict.FASTER) and ab.p_value == pytest.approx(ba.p_value)
    assert ab.confidence == pytest.approx(1 - look_level(5, 12, 0.05))


def test_trials_that_agree_better_than_their_rounds_allow_are_judged_by_their_rounds():
    """Five trials, each the median of 25 rounds whose log ratios spread 5% (SD): each trial's ratio could read about
    1.25% off from its rounds alone. Trials that happen to agree within 0.3%, 1.5% faster, are called faster on
    their own spread; at their rounds' floor the interval holds 1 and the cell is inconclusive."""
    rng = np.random.default_rng(4)
    a = [[1e-3] for _ in range(25)]
    rounds = [[[1e-3 * math.exp(x)] for x in rng.normal(0, 0.05, 25)] for _ in range(5)]
    se = [stats.pair_log_ratio_se(a, b) for b in rounds]
    assert all(0.006 < s < 0.025 for s in se)  # 1.2533 × 5% / 5 = 1.25%, from 25 rounds' MAD
    assert stats.pair_log_ratio_se(a[:1], rounds[0][:1]) == 0.0
    lucky = [-0.015 + d for d in (-0.003, 0.001, 0.002, -0.001, 0.001)]
    (own,) = judge_pairs([lucky], 0.01, looks=DEFAULT_LOOKS)
    (floored,) = judge_pairs([lucky], 0.01, looks=DEFAULT_LOOKS, floors=[float(np.median(se))])
    assert own.verdict == Verdict.FASTER and own.ci_high < 1
    assert floored.verdict == Verdict.INCONCLUSIVE and floored.ci_low < 1 < floored.ci_high
    assert floored.spread == pytest.approx(float(np.median(se))) and own.spread == pytest.approx(np.std(lucky, ddof=1))


def test_the_interval_never_reaches_past_what_the_processes_measured():
    """Four processes at about 1 ms and one at 88 ms (read while another program ran): the bootstrap's interval
    reaches far below anything measured; bounded, it stays within the fastest ÷ s and the slowest × s, s their
    geometric SD, and stays multiplicative about its center."""
    medians = [1.0e-3, 1.1e-3, 0.95e-3, 1.05e-3, 88e-3]
    runs = [list(m * np.random.default_rng(i).lognormal(0, 0.02, 50)) for i, m in enumerate(medians)]
    raw = stats.rerun_interval(runs)
    process = [float(np.median(r)) for r in runs]
    s = math.exp(np.std(np.log(process), ddof=1))
    lo, hi = stats.bounded(raw, process)
    assert raw[0] < min(process) / s  # the bootstrap's own interval: below anything measured
    assert min(process) / s <= lo * (1 + 1e-9) and hi <= max(process) * s * (1 + 1e-9)
    assert math.sqrt(lo * hi) == pytest.approx(math.sqrt(raw[0] * raw[1]))
    summary = stats.summarize([Measurement(r, 1, 0.1, "ci") for r in runs], 1)
    assert summary.ci95_low_s == pytest.approx(lo) and summary.ci95_high_s == pytest.approx(hi)
    assert stats.bounded((1 / 1.04, 1.04), [0.95, 1.0, 1.05]) == pytest.approx((1 / 1.04, 1.04))  # inside: as is


def test_processes_ten_times_apart_are_unmeasured_with_the_reason():
    why = stats.unmeasured([1e-3, 1.1e-3, 88e-3])
    assert why.startswith("its processes disagree 88×") and "1 ms to 88 ms" in why
    assert stats.unmeasured([1e-3, 9.9e-3]) is None and stats.unmeasured([1e-3]) is None


def test_a_far_trial_is_set_aside_only_where_other_processes_used_the_cpu():
    """The trials of a sweep's cell (mlp_batchnorm bs8 inference, jax against a 2-thread torch): in one of them a
    test run took a core, and torch read 400× slower in that trial alone."""
    logs = [math.log(r) for r in (0.815, 0.844, 0.83, 0.797, 0.002, 0.834)]
    ((i, why),) = stats.far_trials(logs, [0.04, 0.04, 0.04, 0.08, 0.97, 0.03])
    assert i == 4 and why.startswith("its ratio 0.002 is 4") and "off its siblings' 0.83" in why and "0.97 cores" in why
    assert stats.far_trials(logs, [0.0] * 6) == []  # quiet: whatever it read stays
    assert [i for i, _ in stats.far_trials([-x for x in logs], [0.97] * 6)] == [4]  # either side slowed
    assert stats.far_trials([0.0, 0.25, -0.2, 0.1], [0.9] * 4) == []  # trials 20-30% apart under load: drift
    assert stats.far_trials(logs[3:5], [0.97, 0.97]) == []  # two trials: neither is the odd one out


def test_a_cell_judges_without_its_set_aside_trials_and_keeps_them():
    from experiments.harness.trials import Cell, Compared, Trial, Turn
    from experiments.common.protocol import Burst, Prepared

    def trial(index, ratio, busy):
        turns = [Turn(prepared=Prepared("ok"), bursts=[Burst([t])]) for t in (1e-3, ratio * 1e-3)]
        return Trial(index, turns, meter={"wall_s": 1.0, "busy_cpu_s": busy + 1.0, "own_cpu_s": 0.0,
                                          "workers_cpu_s": 1.0})

    c = Compared(Cell(8, "inference"), [trial(i, r, b) for i, (r, b) in enumerate(
        [(0.82, 0.0), (0.84, 0.0), (0.002, 0.97), (0.80, 0.0), (0.83, 0.1)])])
    assert [t.index for t in c.used(1, 0)] == [0, 1, 3, 4] and len(c.trials) == 5
    assert [(t.index, why.split(" is ")[0]) for t, why in c.set_aside(1, 0)] == [(2, "its ratio 0.002")]
    assert c.log_ratios(1, 0) == pytest.approx([math.log(r) for r in (0.82, 0.84, 0.80, 0.83)])
    (v,) = judge_pairs([c.log_ratios(1, 0)], 0.03, 0.05)
    (all_in,) = judge_pairs([[t.log_ratio(1, 0) for t in c.trials]], 0.03, 0.05)
    assert v.verdict == Verdict.FASTER and all_in.verdict == Verdict.INCONCLUSIVE and all_in.ci_low < 0.05


def test_a_cells_floor_is_the_median_of_what_its_trials_rounds_leave_uncertain():
    from experiments.common.protocol import Burst, Prepared
    from experiments.harness.trials import Cell, Compared, Trial, Turn

    def trial(index, spread):
        b = [Burst([1e-3 * math.exp(spread * (-1) ** r * (r % 3))]) for r in range(9)]
        turns = [Turn(prepared=Prepared("ok"), bursts=[Burst([1e-3])] * 9), Turn(prepared=Prepared("ok"), bursts=b)]
        return Trial(index, turns)

    c = Compared(Cell(8, "inference"), [trial(i, sd) for i, sd in enumerate((0.01, 0.02, 0.04))])
    ses = [t.log_ratio_se(1, 0) for t in c.trials]
    assert ses[0] < ses[1] < ses[2] and c.floor(1, 0) == pytest.approx(ses[1])
    assert Compared(Cell(8, "inference")).floor(1, 0) == 0.0


def test_a_far_process_is_replaced_only_where_other_processes_used_the_cpu():
    medians = [1.0e-3, 1.1e-3, 0.95e-3, 1.05e-3, 88e-3]
    ((i, why),) = stats.to_replace(medians, [0.0, 0.0, 0.0, 0.0, 1.17])
    assert i == 4 and why.startswith("its median 88 ms is 85.9× above its siblings' 1.025 ms") and "1.17 cores" in why
    assert stats.to_replace(medians, [0.0] * 5) == []  # a quiet machine's drift stays
    # processes 20-70% apart under load are the machine's drift, not an outlier
    assert stats.to_replace([1.0e-3, 1.2e-3, 1.7e-3, 1.1e-3, 1.4e-3], [0.5] * 5) == []
    # two processes: the loaded one, 3× away, goes
    assert [i for i, _ in stats.to_replace([1e-3, 3e-3], [0.0, 0.9])] == [1]
    assert stats.to_replace([1e-3], [2.0]) == []
    # far below its slowed siblings: the process the other program disturbed least stays
    assert stats.to_replace([79e-3, 0.9e-3, 80e-3, 78e-3, 81e-3], [1.0] * 5) == []


def test_threads_beyond_the_free_cores_are_oversubscribed_with_the_setting_to_change():
    hint = oversubscription("torch", 2, 2, 1.0)
    assert hint.startswith("2 intra-op threads on 2 cores while other processes used 1.00 of the machine's 2")
    assert "framework.threads" in hint and "to 1" in hint and "close the other program" in hint
    assert "XLA" in oversubscription("jax", 2, 2, 0.9)
    assert oversubscription("torch", 2, 2, 0.1) is None  # the parent's polling and jiffies: not oversubscribed
    assert oversubscription("torch", 1, 2, 1.0) is None  # one thread beside one busy program
    assert oversubscription("torch", 1, 2, 1.5) == ("1 intra-op threads on 2 cores while other processes used 1.50 "
                                                     "of the machine's 2: close the other program")
    assert oversubscription("torch", None, 2, 2.0) is None
    # a worker on one of the machine's two cores (jax, framework.threads=1): others' use counts against the machine
    assert oversubscription("jax", 1, 1, 0.9, machine_cores=2) is None
    assert oversubscription("jax", 1, 1, 1.6, machine_cores=2).endswith("used 1.60 of the machine's 2: close the "
                                                                        "other program")


class FakeClock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def test_a_burst_times_blocks_for_about_its_length_and_syncs_each_call():
    clock, synced = FakeClock(), []

    def fn():
        clock.t += 1e-3
        return "out"

    samples = timing.burst(fn, synced.append, block=4, seconds=0.05, clock=clock)
    assert len(samples) == 13  # 13 blocks of 4 ms: the first to end past 50 ms
    assert samples == pytest.approx([1e-3] * 13) and len(synced) == 13 * 4
    assert timing.burst(fn, synced.append, block=1, seconds=0.0, clock=clock) == pytest.approx([1e-3])

"""The paired verdict on log ratios whose answer is known: Student's t interval and test, the verdict rules,
Benjamini-Hochberg, the A/A and planted rates, the sequential looks' level, and the floor a trial's rounds set."""
import math

import numpy as np
import pytest
from scipy import stats as scipy_stats

from experiments.stats import ratios
from experiments.stats.looks import Looks, look_level
from experiments.stats.paired import judge_pairs, paired_t
from experiments.stats.verdicts import Verdict


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
    se = [ratios.pair_log_ratio_se(a, b) for b in rounds]
    assert all(0.006 < s < 0.025 for s in se)  # 1.2533 × 5% / 5 = 1.25%, from 25 rounds' MAD
    assert ratios.pair_log_ratio_se(a[:1], rounds[0][:1]) == 0.0
    lucky = [-0.015 + d for d in (-0.003, 0.001, 0.002, -0.001, 0.001)]
    (own,) = judge_pairs([lucky], 0.01, looks=DEFAULT_LOOKS)
    (floored,) = judge_pairs([lucky], 0.01, looks=DEFAULT_LOOKS, floors=[float(np.median(se))])
    assert own.verdict == Verdict.FASTER and own.ci_high < 1
    assert floored.verdict == Verdict.INCONCLUSIVE and floored.ci_low < 1 < floored.ci_high
    assert floored.spread == pytest.approx(float(np.median(se))) and own.spread == pytest.approx(np.std(lucky, ddof=1))


def test_a_judgement_reads_back_from_the_store_as_it_was_written():
    """What a point's run holds (its numbers as speedups, its verdict's tag) reads back to the same judgement: the
    ratio B/A, its interval, p, q, trials, look and spread; a single trial's unknown numbers stay unknown."""
    (c,) = judge_pairs([[0.05, 0.07, 0.06, 0.08, 0.04]], 0.03, 0.05)
    back = type(c).read(str(c.verdict), c.numbers())
    assert back.verdict is c.verdict and back.pairs == c.pairs == 5
    assert [back.ratio, back.ci_low, back.ci_high, back.p_value, back.q_value, back.confidence, back.spread] == \
        pytest.approx([c.ratio, c.ci_low, c.ci_high, c.p_value, c.q_value, c.confidence, c.spread])
    assert c.numbers()["speedup"] == pytest.approx(1 / c.ratio) and c.numbers()["speedup_ci95_low"] < 1
    (one,) = judge_pairs([[0.05]])
    assert set(one.numbers()) == {"speedup", "speedup_trials"}
    assert math.isnan(type(one).read(str(one.verdict), one.numbers()).ci_low)
    older = {k: v for k, v in c.numbers().items() if k not in ("speedup_look_level", "speedup_spread", "mde")}
    was = type(c).read(str(c.verdict), older)  # a store written before the looks and the MDE were recorded
    assert was.verdict is c.verdict and was.ci_low == pytest.approx(c.ci_low) and math.isnan(was.mde)


def test_a_cells_json_gives_the_speedup_and_the_ratio_each_with_its_interval():
    (c,) = judge_pairs([[0.05, 0.07, 0.06, 0.08, 0.04]], 0.03, 0.05)
    said = c.as_json()
    assert said["verdict"] == "slower" and said["trials"] == 5 and said["ratio"] == c.ratio
    assert said["interval"] == [c.ci_low, c.ci_high] and (said["low"], said["high"]) == pytest.approx(
        (1 / c.ci_high, 1 / c.ci_low))
    assert c.as_step() == {"ratio": c.ratio, "interval": [c.ci_low, c.ci_high], "verdict": "slower", "pairs": 5,
                           "mde": c.mde}
    (one,) = judge_pairs([[0.05]])
    assert one.as_json()["low"] is None and one.as_json()["interval"] == [None, None]


def test_a_judgement_in_words_keeps_its_interval_on_the_side_it_names():
    (slow, fast, same) = judge_pairs([[0.41, 0.42, 0.40], [-0.2, -0.21, -0.19], [0.0, 0.01, -0.01]], 0.05, 0.05)
    assert slow.said().startswith("1.51× slower [") and not slow.said().endswith("slower")
    assert fast.said().startswith("1.22× faster [")
    assert same.said().endswith(f", no change, MDE ×{same.mde:.3g}")
    assert same.brief().endswith(f", no change, 3 pairs, MDE ×{same.mde:.3f}")


@pytest.mark.parametrize("sd", [0.02, 0.1])
def test_the_mde_is_the_smallest_ratio_its_trials_call_slower_or_faster(sd):
    """The same trials moved just past the MDE are called slower (its mirror, faster), and just short of it not:
    with a wide spread the interval's half-width sets it, with a narrow one the threshold."""
    x = np.array([-1.5, -0.5, 0.0, 0.5, 1.5]) * sd / np.std([-1.5, -0.5, 0.0, 0.5, 1.5], ddof=1)
    (c,) = judge_pairs([list(x)], 0.05, 0.05)
    assert c.mde > 1.05 if sd == 0.1 else c.mde == pytest.approx(1.05)

    def called(log_ratio: float) -> Verdict:
        return judge_pairs([list(x + log_ratio)], 0.05, 0.05)[0].verdict

    assert called(math.log(c.mde) + 1e-3) == Verdict.SLOWER and called(math.log(c.mde) - 1e-3) != Verdict.SLOWER
    if sd == 0.1:  # the half-width binds on both sides alike
        assert called(-math.log(c.mde) - 1e-3) == Verdict.FASTER
        assert called(-math.log(c.mde) + 1e-3) != Verdict.FASTER

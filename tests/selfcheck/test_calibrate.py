"""calibrate's A/A and A/B checks on series with a known truth: replicate pairs, planted slowdowns, the minimal
detectable effect, and rates with their binomial interval."""
import numpy as np
import pytest
import pandas as pd

from experiments.selfcheck import calibrate
from tests.helpers import ROOT, nnbench


def replicates(rng, points=12, repeats=6, spread=0.03):
    """history.series along `repeat`: `points` points, `repeats` replicates of 5 processes each, no change."""
    rows = []
    for p in range(points):
        for r in range(repeats):
            ms = list(1e-3 * (1 + p) * rng.lognormal(0, spread, 5))
            rows.append({"model": "lenet", "op": "inference", "batch_size": 2 ** p, "variant": "jax-jit fp32",
                         "device": "cpu", "value": str(r), "position": r, "runs": 1, "processes": 5,
                         "median_s": float(np.median(ms)), "process_medians_s": ms, "run_ids": f"{p}-{r}"})
    return pd.DataFrame(rows)


def test_replicates_pair_up_as_independent_comparisons():
    pairs = calibrate.replicate_pairs(replicates(np.random.default_rng(0), repeats=5))
    assert [sorted(p["value"].unique()) for p in pairs] == [["0", "1"], ["2", "3"]]  # the fifth has no partner
    assert all(set(p["position"]) == {0, 1} for p in pairs)


def test_a_slowed_pair_scales_the_second_replicate_only():
    pair = calibrate.replicate_pairs(replicates(np.random.default_rng(1)))[0]
    slow = calibrate.slowed(pair, 1.5)
    first, second = (slow["position"] == 0), (slow["position"] == 1)
    assert slow.loc[first, "median_s"].tolist() == pair.loc[first, "median_s"].tolist()
    assert np.allclose(slow.loc[second, "median_s"], 1.5 * pair.loc[second, "median_s"])
    before, after = pair.loc[second, "process_medians_s"].iloc[0], slow.loc[second, "process_medians_s"].iloc[0]
    assert np.allclose(after, [1.5 * m for m in before])


def test_a_a_says_no_change_and_planted_slowdowns_are_found():
    result = calibrate.aa_ab(calibrate.replicate_pairs(replicates(np.random.default_rng(2), repeats=18)))
    assert result["n"] == 108 and result["no_change"] >= 103 and result["interval_holds_1"] >= 96
    assert result["detected"][1.5] == 108 and result["detected"][1.2] == 108  # 3% noise: 20% is plain
    assert 1.01 < result["mde"] <= 1.1
    text = "\n".join(calibrate.lines(result, "test"))
    assert "A/A (test): no change in" in text and "minimal detectable effect (test): " in text


def test_rates_come_with_their_binomial_interval():
    assert calibrate.rate(95, 100) == "95 of 100 = 95.0% [88.7%, 98.4%]"
    assert calibrate.rate(0, 0) == "no comparisons"


def test_the_paired_minimal_detectable_effect_is_the_smallest_shift_found_in_90_percent():
    """A/A comparisons whose pairs' log ratios spread 2%: a planted shift of 1% is lost in it, one of 10% is found in
    every comparison, and the MDE lies between; no spread at all makes the smallest step of the grid the MDE."""
    rng = np.random.default_rng(3)
    aa = [list(rng.normal(0, 0.02, 6)) for _ in range(20)]
    mde = calibrate.paired_mde(aa)
    assert mde is not None and 1.03 < mde <= 1.1  # beyond the 3% threshold, and well found by 10%
    assert calibrate.paired_mde([[0.0] * 6] * 4) == 1.04  # the first step past the threshold


def test_the_paired_table_puts_both_verdicts_side_by_side():
    from experiments.measure.verdict import PairedComparison, Verdict

    def said(verdict, ratio):
        return PairedComparison(ratio, ratio * 0.99, ratio * 1.01, 0.01, 0.01, verdict, 6), 80.0

    paired = {"A/A": [said(Verdict.SAME, 1.0), said(Verdict.FASTER, 0.95)],
              1.05: [said(Verdict.SLOWER, 1.05)] * 2, 1.10: [said(Verdict.SLOWER, 1.1)] * 2,
              "aa_log_ratios": [[0.0] * 6] * 2}
    unpaired = {"n": 2, "no_change": 2, "interval_holds_1": 2, "detected": {}, "mde": 1.61}
    text = "\n".join(calibrate.paired_table(unpaired, {1.05: 0, 1.10: 1}, 12.0, paired, 2))
    assert "| A/A: slower or faster | 0 of 2 = 0.0% [0.0%, 84.2%] | 1 of 2 = 50.0% [1.3%, 98.7%] |" in text
    assert "| planted 5% slower: found | 0 of 2 = 0.0% [0.0%, 84.2%] | 2 of 2 = 100.0% [15.8%, 100.0%] |" in text
    assert "| 61% | 4% |" in text and "median 80 s" in text


def calibrate_says(*argv: str):
    r = nnbench("calibrate", list(argv), ROOT)
    return r.returncode, r.stderr.strip().splitlines()


def test_paired_bad_input_is_one_line_before_anything_is_built():
    code, err = calibrate_says("--paired", "--repeats", "2", "--sweep", "last")
    assert code == 2 and len(err) == 1 and err[0].startswith("nnbench calibrate: error: with --paired: "), err
    assert "no --sweep or --planted" in err[0]


@pytest.mark.slow
def test_paired_overrides_must_make_one_point():
    """The overrides go to the planted point in every environment: two batch sizes are one line, exit 2."""
    code, err = calibrate_says("--paired", "--repeats", "2", "batch_size=8,32")
    assert code == 2 and len(err) == 1 and "give one point" in err[0], err


def test_paired_comparisons_go_through_the_two_sided_engine(monkeypatch, tmp_path):
    """calibrate --paired compares the first planted version with each other one through `pairs.compare` (two
    sides), `n` times, with its flags' design and a seed per round; each case keeps what the engine's judge said.
    (The trials stand in: every round of a trial reads B/A as the versions' slowdowns say.)"""
    from experiments.common.protocol import Burst, Prepared
    from experiments.harness import pairs

    def trial(index: int, b_over_a: float) -> pairs.Trial:
        return pairs.Trial(index, [pairs.Turn(prepared=Prepared("ok"), bursts=[Burst([t] * 5) for _ in range(3)])
                                   for t in (1e-3, 1e-3 * b_over_a)])

    asked = []

    def compare(a, b, design, judge, directory, on_trial=None):
        asked.append((a, b, design))
        c = pairs.Compared(pairs.Cell(32, "inference"), [trial(k, calibrate.PAIRED[b] / calibrate.PAIRED[a])
                                                         for k in range(design.trials)])
        return [pairs.Judged(c, judge([c.log_ratios(1, 0)])[0])]

    monkeypatch.setattr(pairs, "compare", compare)
    monkeypatch.setattr(pairs.Side, "of", classmethod(lambda cls, job, label, cache=None: label))
    said = calibrate.paired_comparisons(dict.fromkeys(calibrate.PAIRED), 2, 3, 5, tmp_path)
    assert [(a, b) for a, b, _ in asked] == [("1.0", "1.0.1"), ("1.0", "1.0.5"), ("1.0", "1.1")] * 2
    assert {(d.trials, d.max_trials, d.rounds) for *_, d in asked} == {(3, 6, 5)}
    assert [d.seed for *_, d in asked] == [0, 0, 0, 1, 1, 1]
    assert [str(v.verdict) for v, _ in said["A/A"]] == ["no change"] * 2 and said["aa_log_ratios"] == [[0.0] * 3] * 2
    assert [str(v.verdict) for v, _ in said[1.05] + said[1.1]] == ["slower"] * 4
    assert said[1.1][0][0].ratio == pytest.approx(1.1) and said[1.1][0][0].pairs == 3

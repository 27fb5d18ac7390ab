"""calibrate's A/A and A/B checks on series with a known truth: replicate pairs, planted slowdowns, the minimal
detectable effect, and rates with their binomial interval; --paired's promise judged over cells whose answer is
known, and the sweeps each of its rounds runs."""
import math
import os
import sys
from pathlib import Path

import numpy as np
import pytest
import pandas as pd

from experiments.stats.geomean import Evidence
from experiments.selfcheck import calibrate, promise
from tests.helpers import ROOT, nnbench
from tests.helpers.judged import judged


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


def aa_cell(log_ratio: float, verdict: str = "no change", width: float = 0.02, bs: int = 32) -> Evidence:
    ratio = math.exp(log_ratio)
    return Evidence("g", "lenet", "inference", bs, "B", "A", [0, 1, 2, 3, 4], [log_ratio] * 5,
                    judged(ratio, ratio / (1 + width), ratio * (1 + width), verdict))


def run_of(case: str, cells: list[Evidence], aa: bool = True) -> promise.Run:
    return promise.Run(promise.Case(case, (), aa), cells, "machine check: quiet: ...", [0.02, 0.1], 60.0)


def test_the_promise_is_judged_over_every_cell_each_rate_with_its_interval():
    """40 A/A cells each way round, one of 80 called faster and two whose interval misses 1; the mean log ratio
    +0.1% one way and -0.1% the other; 9 of 10 planted cells found: the promise holds. A bias of 1% the second side
    faster, whichever order, breaks it, and says so."""
    ab = [aa_cell(0.001 * (-1) ** i) for i in range(39)] + [aa_cell(-0.04, "faster")]
    ba = [aa_cell(-0.001 * (-1) ** i) for i in range(38)] + [aa_cell(0.03, width=0.01)] * 2
    planted = [aa_cell(0.05, "slower")] * 9 + [aa_cell(0.02, "inconclusive")]
    runs = [run_of("A/A README cells (A,B)", ab), run_of("A/A README cells (B,A)", ba),
            run_of("planted 5%", planted, aa=False)]
    lines, met = promise.verdicts(runs)
    assert met and lines[-1] == "this machine meets the paired verdicts' promise over 80 A/A and 10 planted cells"
    assert lines[0] == "A/A slower or faster: 1 of 80 = 1.2% [0.0%, 6.8%] (promise: at most 5%)"
    assert lines[1].startswith("A/A interval holding 1: 77 of 80 = 96.2% [")  # the faster one misses it too
    assert lines[2].startswith("A/A mean log ratio, second side over first, A,B: -0.10% ± ")
    assert lines[4].startswith("planted 5% found slower: 9 of 10 = 90.0% [55.5%, 99.7%]")
    biased = [run_of(f"A/A torch ({order})", [aa_cell(-0.01 + 0.001 * (-1) ** i) for i in range(20)])
              for order in ("A,B", "B,A")] + runs[2:]
    lines, met = promise.verdicts(biased)
    assert not met and "-1.00%" in lines[2] and "-1.00%" in lines[3] and "does not meet" in lines[-1]


def test_each_round_measures_both_a_a_orders_and_the_planted_five_percent(tmp_path):
    a, b = promise.names(tmp_path)
    assert Path(a).read_text() == f'#!/bin/sh\nexec {sys.executable} "$@"\n' and os.access(b, os.X_OK)
    cases = promise.cases(a, b, ("/e/1.0/python", "/e/1.0.5/python"), ["bench.rounds=10"])
    assert [c.name for c in cases] == ["A/A README cells (A,B)", "A/A README cells (B,A)", "A/A torch mlp_relu (A,B)",
                                       "A/A torch mlp_relu (B,A)", "planted 5%"]
    assert [c.aa for c in cases] == [True] * 4 + [False]
    assert cases[1].overrides[:3] == (f"runtime.python={b},{a}", "framework=jax,torch", "model=lenet")
    assert cases[4].overrides[0] == "runtime.python=/e/1.0/python,/e/1.0.5/python"
    assert all(c.overrides[-2:] == ("bench.rounds=10", "report.along=runtime.python") for c in cases)


def calibrate_says(*argv: str):
    r = nnbench("calibrate", list(argv), ROOT)
    return r.returncode, r.stderr.strip().splitlines()


def test_paired_bad_input_is_one_line_before_anything_is_built():
    code, err = calibrate_says("--paired", "--repeats", "2", "--sweep", "last")
    assert code == 2 and len(err) == 1 and err[0].startswith("nnbench calibrate: error: with --paired: "), err
    assert "no --sweep or --planted" in err[0]
    code, err = calibrate_says("--paired", "bench.rounds=0")
    assert code == 2 and len(err) == 1 and "bench.rounds" in err[0], err

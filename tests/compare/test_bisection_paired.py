"""A paired bisect step (compare.bisection_paired): its typed row from the one cell's verdict, or why there is
none, and the line the bisect prints for it."""
from pathlib import Path

from experiments.compare import paired
from experiments.compare.bisection_paired import step
from experiments.stats.verdicts import Verdict
from tests.helpers.judged import judged


def test_a_step_with_its_verdict():
    cell = paired.CellVerdict("lenet", "training", 128, "B", "A", judged(1 / 0.8, 1 / 0.84, 1 / 0.76, Verdict.SLOWER,
                                                                          6, mde=1.05), "run1", "", "")
    row = step(["nnbench-planted 1.0", "nnbench-planted 1.1"], [cell], Path("out"))
    listed = row.as_json()
    assert row.verdict == Verdict.SLOWER and listed["pairs"] == 6 and listed["skipped"] is None
    assert listed["run_id"] == "run1" and listed["ratio"] == 1 / 0.8 and listed["interval"] == [1 / 0.84, 1 / 0.76]
    assert row.said() == "×1.250 [1.190, 1.316], slower, 6 pairs, MDE ×1.050"


def test_a_step_without_a_verdict_says_where_to_look():
    row = step(["A", "B"], [], Path("/tmp/sweep"))
    assert row.as_json()["ratio"] is None and row.verdict == Verdict.UNKNOWN
    assert row.skipped == "no paired verdict: the sweep's records in /tmp/sweep say why"
    assert row.said() == "no ratio, skipped: no paired verdict: the sweep's records in /tmp/sweep say why, 0 pairs"

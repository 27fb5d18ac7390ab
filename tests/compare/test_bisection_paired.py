"""A paired bisect step in words (compare.bisection_paired): its row from the one cell's verdict, or why there is
none, and the line the bisect prints for it."""
from pathlib import Path

from experiments.compare import paired
from experiments.compare.bisection_paired import step, step_row
from experiments.stats.verdicts import Verdict


def test_a_step_with_its_verdict():
    cell = paired.CellVerdict("lenet", "training", 128, "B", "A", 0.8, 0.76, 0.84, Verdict.SLOWER, 6, "run1", "", "")
    row = step_row(["nnbench-planted 1.0", "nnbench-planted 1.1"], [cell], Path("out"))
    assert row["verdict"] == "slower" and row["pairs"] == 6 and row["skipped"] is None and row["run_id"] == "run1"
    assert row["ratio"] == 1 / 0.8 and row["interval"] == [1 / 0.84, 1 / 0.76]
    assert step(row) == "×1.250 [1.190, 1.316], slower, 6 pairs"


def test_a_step_without_a_verdict_says_where_to_look():
    row = step_row(["A", "B"], [], Path("/tmp/sweep"))
    assert row["ratio"] is None and row["skipped"] == "no paired verdict: the sweep's records in /tmp/sweep say why"
    assert step(row) == "no ratio, skipped: no paired verdict: the sweep's records in /tmp/sweep say why, 0 pairs"

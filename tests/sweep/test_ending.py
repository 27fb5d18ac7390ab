"""How a sweep ends: its last line counts every outcome."""
from experiments.sweep import ending


def test_the_last_line_counts_every_outcome():
    o = ending.Outcome(ending.Counter(ok=5, skipped=1, failed=1, interrupted=1), planned=10)
    assert o.line() == "5 finished, 1 skipped, 1 failed, 1 interrupted, 2 lost"
    assert o.line(missing_as="not measured").endswith("2 not measured")
    assert ending.Outcome(ending.Counter(ok=2), planned=2).line() == "2 finished, 0 skipped, 0 failed"

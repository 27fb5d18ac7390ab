"""`nnbench agree`: its table's shape and last line in a subprocess (not the value of X), its ratios."""
from __future__ import annotations

import math
import re

import pytest

from tests.helpers import nnbench


@pytest.mark.slow
def test_quick_run_prints_one_row_per_model_and_framework(tmp_path):
    out = nnbench("agree", ["--quick", "--models", "mlp_relu", "--repeats", "2"], tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.strip().splitlines()
    header = next(i for i, line in enumerate(lines) if line.split()[:2] == ["model", "framework"])
    rows = [line.split() for line in lines[header + 1:] if line.startswith("mlp_relu")]
    assert sorted(r[1] for r in rows) == ["jax", "torch"]
    ratios = []
    for row in rows:
        assert len(row) == 7
        times, pair = [float(v) for v in row[2:5]], [float(v) for v in row[5:7]]
        assert all(math.isfinite(v) and v > 0 for v in times + pair), row
        ratios += pair
    assert re.search(r"load average .* other processes used [\d.]+ of \d+ cores", out.stdout)
    last = re.fullmatch(r"max \|ratio-1\| = (\S+)", lines[-1])
    assert last, lines[-1]
    assert float(last[1]) == pytest.approx(max(abs(r - 1) for r in ratios), abs=1e-4)  # the table's ratios


def test_ratios_pair_rounds_and_x_is_the_worst():
    from experiments.selfcheck.agree import table

    # the machine doubles every time in round 2; the harness reads 1% under Timer and 3% over bare throughout
    drift = [1.0, 2.0, 1.0]
    times = {("m", "jax"): {"harness": drift, "timer": [t / 0.99 for t in drift], "bare": [t / 1.03 for t in drift]}}
    rows, worst = table(times)
    assert rows[1].split()[-2:] == ["0.9900", "1.0300"]
    assert worst == pytest.approx(0.03)

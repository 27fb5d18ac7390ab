"""A job's points across its processes: the spread between processes that the unpaired engine's stop rule aims at;
and, paired, how a group's trials become each variant's processes (one per trial) and its reading."""
import numpy as np
import pytest

from experiments.common.protocol import Burst, OpResult, Point, PointResult, Prepared, Ready
from experiments.harness.pairs import Cell, Compared, Trial, Turn
from experiments.measure.reading import read
from experiments.sweep import paired_engine
from experiments.sweep.unpaired_engine import between
from tests.helpers import ok_op


def result(**medians: float) -> PointResult:
    return PointResult(32, "cpu", {}, {op: ok_op(m, 32) for op, m in medians.items()})


def test_the_spread_is_the_median_over_points_of_the_sd_of_log_process_medians():
    results = [[result(inference=1.0, training=2.0), result(inference=1.2, training=2.0)],
               [result(inference=3.0), result(inference=3.3)], [result(inference=5.0)]]
    got = between(results, {"inference", "training", "grad"}, prior=0.1)
    sds = [np.std(np.log([1.0, 1.2]), ddof=1), np.std(np.log([3.0, 3.3]), ddof=1)]
    assert got["inference"] == pytest.approx(np.median(sds))
    assert got["training"] == 0.0  # two processes that agree
    assert got["grad"] == 0.1  # not measured twice yet: the prior


def test_before_two_processes_the_prior_holds():
    assert between([[result(inference=1.0)], []], {"inference"}, prior=0.25) == {"inference": 0.25}
    skipped = PointResult(32, "cpu", {}, {"training": OpResult("skipped", reason="x")})
    assert between([[skipped, skipped]], {"training"}, prior=0.1) == {"training": 0.1}


def turn(ms: float | None) -> Turn:
    """A side's turn at a cell: five bursts at `ms` per call (None: it sat the cell out)."""
    ready = Ready({"device_name": "cpu"}, {"cpu_count_logical": 2.0}, 0.5, 1, 2)
    if ms is None:
        return Turn(ready)
    bursts = [Burst([ms * 1e-3] * 4, {"wall_s": 0.02, "minor_faults": 0.0}) for _ in range(5)]
    return Turn(ready, Prepared("ok", device="cpu", first_call_s=0.1, block=1), bursts)


def test_each_trial_is_a_process_of_each_variant_and_a_failed_side_fails_only_its_point():
    """Two trials of jax (side 0) and torch (side 1) on bs32's cells: in trial 0 torch's worker crashed on training,
    so trial 0 holds jax's training but none of torch's; torch's point fails, naming its process; jax's has both
    trials of both ops."""
    crashed = Trial(0, [turn(3.0), turn(None)], failure="worker B killed by SIGSEGV", failed_side=1,
                    stderr_tail="--- worker B")
    compared = [Compared(Cell(32, "inference"), [Trial(0, [turn(1.0), turn(2.0)]), Trial(1, [turn(1.1), turn(2.2)])]),
                Compared(Cell(32, "training"), [crashed, Trial(1, [turn(3.3), turn(None)])])]
    point = Point(32, ("inference", "training"))
    jax, torch = (paired_engine.results(point, compared, side, fw) for side, fw in ((0, "jax"), (1, "torch")))
    assert [sorted(r.ops) for r in jax] == [["inference"], ["inference", "training"]]  # trial 0's training: failed
    assert jax[1].ops["training"].stats.median_s == pytest.approx(3.3e-3)
    assert jax[0].ops["inference"].measurement.samples_s == [1e-3] * 20 and jax[0].startup_s == 0.5
    assert torch[0].failure == "worker B killed by SIGSEGV" and torch[0].stderr_tail == "--- worker B"
    assert sorted(torch[1].ops) == ["inference"]  # it sat training out in trial 1
    a, b = read(point, jax), read(point, torch)
    assert a.failure is None and a.processes == 2 and a.ops["inference"].stats.median_s == pytest.approx(1.05e-3)
    assert b.failure == "worker B killed by SIGSEGV (process 1 of 2)"

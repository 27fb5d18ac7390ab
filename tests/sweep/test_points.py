"""A job's points across its processes: the spread between processes that the stop rule aims at."""
import numpy as np
import pytest

from experiments.common.protocol import OpResult, PointResult
from experiments.sweep.points import between
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

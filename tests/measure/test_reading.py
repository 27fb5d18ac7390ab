"""A point's reading: its processes merged and judged on typed data (MFU, noisy, unstable), before any flattening;
a paired point's trials, each one process, and how it was compared."""
import time
from dataclasses import fields, replace

import numpy as np
import pytest

from experiments.common.columns import DERIVED
from experiments.common.protocol import Measurement, OpResult, Point, PointResult
from experiments.measure import peaks as hardware
from experiments.measure.machine import MachineCheck
from experiments.measure.reading import NOISY_CORES, OpReading, Paired, merge, read
from experiments.stats.paired import PairedComparison
from experiments.stats.verdicts import Verdict
from tests.helpers import budget, ok_op

POINT = Point(32, ("inference", "training"))
GPU = {"device_name": "NVIDIA H200", "precision_policy": "bf16/tf32-off"}


def process(median: float, busy: float = 0.0, spread: float = 0.01, env: dict | None = None) -> PointResult:
    op = ok_op(median, 32, list(median * np.linspace(1 - spread, 1 + spread, 40)))
    ops = {"inference": replace(op, flops=2 * 10**9, background_cores=busy, peak_mem_bytes=int(median * 1e9)),
           "training": OpResult("skipped", reason="constant weights")}
    return PointResult(32, "cpu", env or {}, ops, peak_tflops=2.0, machine={"load_avg_1m": median * 1e3})


def test_processes_merge_into_one_op_with_its_rates_and_flags():
    r = read(POINT, [process(0.002, env=GPU), process(0.003, busy=0.5), process(0.004, busy=0.1)])
    o = r.ops["inference"]
    assert r.outcome == "ok" and r.processes == 3 and len(o.measurements) == 3 and r.device == "cpu"
    assert o.stats.median_s == pytest.approx(0.003) and o.stats.n_samples == 120
    assert o.result.peak_mem_bytes == 4_000_000 and o.result.background_cores == 0.5  # their largest
    assert o.achieved_tflops == pytest.approx(2e9 / 0.003 / 1e12)
    assert o.mfu == o.mfu_vendor == pytest.approx(o.achieved_tflops / 989)  # a known GPU: its data sheet's bf16 peak
    assert r.peak.tflops == 989 and r.peak.source.startswith("data sheet: NVIDIA H200")
    assert r.skipped == {"training": "constant weights"} and r.machine == {"load_avg_1m": 3.0}
    assert r.noisy and r.background_cores == 0.5 > NOISY_CORES and o.metrics()["mfu"] == o.mfu


def test_processes_far_apart_are_unstable_with_a_hint_that_names_the_machine():
    drifting = MachineCheck(window_sd=0.12, window_spread=1.44, other_cores=0.0, load_avg_1m=1.0, cores=2)
    r = read(POINT, [process(m) for m in (0.25e-3, 0.4e-3, 0.38e-3, 0.746e-3, 0.3e-3)], drifting)
    assert r.unstable == ("inference",) and not r.noisy
    assert r.ops["inference"].stats.process_spread == pytest.approx(0.746 / 0.25, rel=0.02)
    assert "the machine itself drifts (a fixed loop's windows spread 1.44×)" in r.hint
    assert read(POINT, [process(m) for m in (1e-3, 1.01e-3, 0.99e-3)]).unstable == ()


def test_a_failed_process_fails_the_point_and_keeps_the_others_measurements():
    crashed = PointResult(32, failure="worker killed by SIGSEGV", stderr_tail="segfault here")
    r = read(POINT, [process(0.002), crashed, process(0.002)])
    assert r.outcome == "failed" and r.failure == "worker killed by SIGSEGV (process 2 of 3)"
    assert r.stderr_tail == "segfault here" and len(r.ops["inference"].measurements) == 2
    assert read(POINT, [crashed]).failure == "worker killed by SIGSEGV" and read(POINT, [crashed]).device == "n/a"


def test_one_process_keeps_its_statistics_and_a_runner_gets_them_from_its_samples():
    one = ok_op(0.002, 32)
    assert merge([one], 32) is one
    runner = OpResult("ok", device="cpu", measurement=Measurement([0.001, 0.002, 0.003], 1, float("nan"), "runner"))
    assert merge([runner], 32).stats.median_s == 0.002 and merge([runner], 32).stats.n_samples == 3


def test_the_derived_metrics_are_named_once():
    assert tuple(f.name for f in fields(OpReading) if f.name in DERIVED) == DERIVED


def test_mfu_divides_every_framework_by_one_peak_and_never_reads_above_one(tmp_path):
    """One machine, device and precision: the peak is the best framework's calibration, for jax and torch alike; a
    rate above it raises it (for the sweep's later points too), and the point says so."""
    cpu = {"host": "h", "device_name": "cpu", "precision_policy": "fp32/tf32-off"}
    peaks = tmp_path / "peaks.json"
    peaks.write_text('{"h|cpu|fp32/tf32-off|jax": 0.123, "h|cpu|fp32/tf32-off|torch": 0.066}')
    slow = read(POINT, [process(0.04, env=cpu)], peaks=peaks, name="slow")  # 0.05 TFLOP/s
    assert slow.peak.tflops == 0.123 and "through jax" in slow.peak.source and "torch 0.066" in slow.peak.source
    assert slow.ops["inference"].mfu == pytest.approx(0.05 / 0.123)
    fast = read(POINT, [process(0.01, env=cpu)], peaks=peaks, name="lenet · torch-eager · fp32 · bs32")  # 0.2
    assert fast.peak.tflops == pytest.approx(0.2) and fast.ops["inference"].mfu == pytest.approx(1.0)
    assert fast.peak.source.startswith("raised to lenet · torch-eager · fp32 · bs32's 0.2 TFLOP/s")
    later = read(POINT, [process(0.04, env=cpu)], peaks=peaks)
    assert later.peak == fast.peak and later.ops["inference"].mfu == pytest.approx(0.25)


@pytest.mark.parametrize("precision_policy,tflops", [("bf16/bf16x6", 197), ("fp32/bf16x6", 197 / 6),
                                                      ("fp32/bf16x3", 197 / 3)])
def test_a_tpus_peak_is_its_data_sheet_with_fp32_as_bf16_passes_and_the_matmul_rate_beside(tmp_path, precision_policy,
                                                                                           tflops):
    """TPU v5e ("TPU v5 lite"): 197 bf16 TFLOP/s; fp32 at jax's highest is six bf16 passes, at high three. The rate a
    large matmul sustained there (the worker's calibration) is read beside it, never instead of it."""
    env = {"host": "h", "device_name": "TPU v5 lite", "precision_policy": precision_policy}
    peaks = tmp_path / "peaks.json"
    peaks.write_text(f'{{"h|TPU v5 lite|{precision_policy}|jax": 30.6}}')
    r = read(POINT, [process(0.04, env=env)], peaks=peaks)
    assert r.peak.tflops == pytest.approx(tflops) and r.peak.measured == 30.6
    assert r.peak.source.startswith("data sheet: TPU v5 lite at " + precision_policy)
    assert r.peak.source.endswith("a large matmul through jax sustained 30.6 TFLOP/s")
    assert r.ops["inference"].mfu == r.ops["inference"].mfu_vendor <= 1
    assert hardware.vendor_tflops("TPU v5", "bf16/bf16x6") == 459 and hardware.vendor_tflops("cpu", "fp32") is None


def test_the_calibration_takes_the_sweeps_budget_where_it_is_shorter():
    """The matmul behind a CPU's peak is timed for about 0.3-1 s, or within a shorter bench's budget (bench=quick),
    at a size whose call fits that budget: a rough sweep's first worker of each framework is not held a second over
    what its points get."""
    assert hardware.within(budget("default")) == hardware.within(budget("thorough")) == hardware.CALIBRATION
    quick = hardware.within(budget("quick"))
    assert (quick.min_time_s, quick.max_time_s, quick.warmup_s, quick.target_rel_ci) == (0.05, 0.5, 0.05, 0.05)
    calls = []

    class Step:  # each call 20 ms: the search stops at its first size
        def fn(self):
            calls.append(1)
            time.sleep(0.02)

        def sync(self, out):
            pass

    def spent(b) -> int:
        calls.clear()
        assert hardware.calibrate(lambda n: Step(), budget=b) > 0
        return len(calls)

    brief = hardware.within(budget("quick", max_time_s=0.05, min_samples=3, warmup_s=0))
    # the search's 2 calls, the first call, 2 warm-up calls, 3 samples; CALIBRATION: at least 5 warm-up calls or
    # samples more (0.1 s and 0.3 s of 20 ms calls, at least 2 and 5 of them)
    assert spent(brief) < 10 <= spent(hardware.CALIBRATION)

    sizes = []

    class Cubic(Step):  # a call's time grows as n³: 0.6 ms at 512, 5 ms at 1024, 40 ms at 2048
        def __init__(self, n):
            sizes.append(n)
            self.n = n

        def fn(self):
            time.sleep(0.04 * (self.n / 2048) ** 3)

    def largest(b) -> int:
        sizes.clear()
        hardware.calibrate(Cubic, budget=b)
        return max(sizes)

    # a 15th of quick's min_time_s 0.05 s, 3.3 ms, is reached at 1024 (or sooner, by a sleep overslept);
    # CALIBRATION's 20 ms at 2048
    assert largest(quick) <= 1024 < largest(hardware.CALIBRATION) == 2048


def test_a_paired_points_trials_may_hold_different_ops_and_its_comparison_rides_along():
    """A paired point's later trials measure only the cells left unsettled: each op merges the trials that hold it,
    and one trial's oversubscribed op counts among those. The comparison with the baseline rides along untouched."""
    both = PointResult(32, "cpu", {}, {"inference": ok_op(0.002, 32), "training": ok_op(0.004, 32)})
    crowded = replace(ok_op(0.003, 32), oversubscribed="2 intra-op threads on 2 cores")
    later = [PointResult(32, "cpu", {}, {"inference": ok_op(m, 32)}) for m in (0.0021, 0.0019)]
    r = read(POINT, [both, PointResult(32, "cpu", {}, {"training": crowded}), *later])
    assert r.processes == 4 and r.outcome == "ok"
    assert len(r.ops["inference"].measurements) == 3 and len(r.ops["training"].measurements) == 2
    assert r.ops["inference"].stats.median_s == pytest.approx(0.002) and r.ops["training"].stats.n_samples == 12
    assert r.oversubscribed == {"training": "in 1 of 4 processes, 2 intra-op threads on 2 cores"}
    assert r.paired is None  # read on its own: compared by the group that measured it
    c = PairedComparison(1.5, 1.45, 1.55, 0.001, 0.002, Verdict.SLOWER, 4)
    paired = replace(r, paired=Paired("jax-jit fp32", "torch-eager fp32", {"inference": c}, ("threads 1 vs 2",)))
    assert not paired.paired.is_baseline and paired.paired.ops["inference"].conclusive
    assert Paired("torch-eager fp32", "torch-eager fp32").is_baseline

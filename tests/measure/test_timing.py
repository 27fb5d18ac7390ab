"""Timing core with a fake clock: the first call, warm-up, blocks, sync and the stopping rule."""
import numpy as np
import pytest

from experiments.measure import timing
from experiments.measure.stats import median_ci, summarize
from experiments.measure.timing import measure
from tests.helpers import budget


class FakeClock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def op(clock, durations):
    """A synchronous fake op: each call advances the clock by the next duration."""
    it = iter(durations)

    def fn():
        clock.t += next(it)
        return "out"
    return fn


def noop_sync(_):
    pass


def test_first_call_is_recorded_apart_from_the_samples():
    clock = FakeClock()
    fn = op(clock, [2.0] + [0.01] * 10_000)
    m = measure(fn, noop_sync, budget(warmup_s=0.05, min_samples=5, min_block_s=0.0), clock)
    assert m.first_call_s == pytest.approx(2.0)
    assert max(m.samples_s) == pytest.approx(0.01)


def test_constant_op_stops_on_ci_at_min_samples():
    clock = FakeClock()
    fn = op(clock, [0.001] * 100_000)
    m = measure(fn, noop_sync, budget(warmup_s=0.01, min_samples=8, min_block_s=0.0, min_time_s=0.0), clock)
    assert m.stop_reason == "ci" and len(m.samples_s) == 8


def test_noisy_op_stops_on_time_budget():
    clock = FakeClock()
    rng = np.random.default_rng(0)
    fn = op(clock, rng.uniform(0.001, 0.1, 100_000))  # far too noisy for a ±1% CI
    b = budget(warmup_s=0.01, min_samples=5, max_time_s=2.0, target_rel_ci=0.01, min_block_s=0.0)
    m = measure(fn, noop_sync, b, clock)
    assert m.stop_reason == "time"
    assert 2.0 <= sum(m.samples_s) <= 2.0 + 0.1  # stopped at the first sample past the budget


def test_noisy_op_narrows_until_ci_target_is_met():
    clock = FakeClock()
    rng = np.random.default_rng(1)
    fn = op(clock, rng.normal(0.01, 0.001, 100_000))
    b = budget(warmup_s=0.01, min_samples=5, max_time_s=100.0, target_rel_ci=0.02, min_block_s=0.0, min_time_s=0.0)
    m = measure(fn, noop_sync, b, clock)
    assert m.stop_reason == "ci"
    s = summarize([m], 1)
    assert (s.ci95_high_s - s.ci95_low_s) / 2 <= 0.02 * s.median_s
    # ±10% spread needs well over a handful of samples to pin the median to ±2%
    assert len(m.samples_s) > 20


def test_max_samples_caps_sampling():
    clock = FakeClock()
    rng = np.random.default_rng(2)
    fn = op(clock, rng.uniform(0.001, 0.1, 100_000))
    b = budget(warmup_s=0.01, min_samples=5, max_samples=30, max_time_s=1e9, target_rel_ci=0.001, min_block_s=0.0)
    assert len(measure(fn, noop_sync, b, clock).samples_s) == 30


def test_short_calls_are_timed_in_blocks():
    clock = FakeClock()
    fn = op(clock, [0.0001] * 1_000_000)
    m = measure(fn, noop_sync, budget(warmup_s=0.01, min_samples=5, min_block_s=0.002), clock)
    assert m.block == 20
    assert np.allclose(m.samples_s, 0.0001)  # per-call time, not per-block


def test_sync_work_is_inside_the_timed_region():
    """An async op returns at once; its sync does the work. The harness must time that work."""
    clock = FakeClock()
    pending = []

    def fn():
        pending.append(0.003)  # enqueue work, return a handle immediately
        return len(pending)

    def sync(handle):
        while pending:
            clock.t += pending.pop()

    m = measure(fn, sync, budget(warmup_s=0.01, min_samples=5, min_block_s=0.0), clock)
    assert np.median(m.samples_s) == pytest.approx(0.003)
    assert m.first_call_s == pytest.approx(0.003)


def test_inspect_sees_the_first_output_outside_the_timing():
    clock = FakeClock()
    calls = iter(range(1_000_000))

    def fn():
        clock.t += 0.001
        return next(calls)

    seen = []

    def inspect(out):
        seen.append(out)
        clock.t += 5.0  # a slow check must not count as the first call or as a sample

    m = measure(fn, noop_sync, budget(warmup_s=0.01, min_samples=5, min_block_s=0.0), clock, timing.Watch(inspect))
    assert seen == [0]
    assert m.first_call_s == pytest.approx(0.001) and max(m.samples_s) == pytest.approx(0.001)


def test_warmup_takes_at_least_warmup_calls():
    """A slow op still gets several warm-up calls: its first few calls after the first are often slow too."""
    clock = FakeClock()
    durations = [1.0, 0.5, 0.3, 0.2, 0.1] + [0.1] * 10_000  # settles after a few calls
    m = measure(op(clock, durations), noop_sync, budget(warmup_s=0.01, warmup_calls=4, min_samples=5,
                                                         min_block_s=0.0), clock)
    assert max(m.samples_s) == pytest.approx(0.1)


def test_sampling_lasts_at_least_min_time_even_when_the_ci_is_met():
    """One short window misses drift between windows: a steady op is still sampled for min_time_s."""
    clock = FakeClock()
    fn = op(clock, [0.001] * 100_000)
    m = measure(fn, noop_sync, budget(warmup_s=0.01, min_samples=8, min_block_s=0.0, min_time_s=0.5), clock)
    assert m.stop_reason == "ci" and 0.5 <= sum(m.samples_s) < 0.5 + 0.002
    assert len(m.samples_s) >= 500


def test_meter_change_covers_the_sampling_only():
    """The meter is read right before the first sample and right after the last (page faults, CPU time)."""
    clock = FakeClock()
    fn = op(clock, [1.0] + [0.01] * 10_000)  # a slow first call: outside the metered window
    m = measure(fn, noop_sync, budget(warmup_s=0.05, min_samples=5, min_block_s=0.0, min_time_s=0.0), clock,
                watch=timing.Watch(meter=lambda: {"t": clock.t}))
    assert m.meter["t"] == pytest.approx(sum(m.samples_s) * m.block)
    assert m.calls == len(m.samples_s) * m.block


def test_sampling_stops_once_more_samples_cannot_narrow_the_rerun_interval():
    """Noisy calls (±20%): with no spread between processes known, the process samples on to its ±2% target;
    told that processes differ by 20% (SD of log medians), it stops at ±10%, which is all a re-run can resolve."""
    rng = np.random.default_rng(3)
    b = budget(min_time_s=0.0, max_time_s=50.0, min_block_s=0.0, warmup_s=0.0, warmup_calls=1)
    runs = {}
    for spread in (None, 0.2):
        clock = FakeClock()
        runs[spread] = measure(op(clock, rng.uniform(0.8e-3, 1.2e-3, 1_000_000)), noop_sync, b, clock,
                               between_sd=spread)
    assert runs[None].stop_reason == runs[0.2].stop_reason == "ci"
    assert len(runs[0.2].samples_s) < len(runs[None].samples_s) / 4
    lo, hi = median_ci(runs[0.2].samples_s)
    assert (hi - lo) / 2 <= 0.1 * np.median(runs[0.2].samples_s)
    assert timing.target(b, 0.2) == pytest.approx(0.1) and timing.target(b, 0.01) == b.target_rel_ci


def test_a_measurement_says_where_its_time_went():
    clock = FakeClock()
    m = measure(op(clock, [1.0] + [0.01] * 10_000), noop_sync, budget(warmup_s=0.05, min_time_s=0.2,
                                                                     min_block_s=0.0), clock)
    assert m.first_call_s == 1.0 and m.warmup_s == pytest.approx(0.05, abs=0.011)
    assert m.elapsed_s == pytest.approx(m.first_call_s + m.warmup_s + m.sampling_s)


class FakeDevice:
    """An accelerator on the fake clock: a call is dispatched in `dispatch_s` and queued; the device runs the queue
    in order, `work_s` each; a sync waits for a call's end and pays `round_trip_s` to hear of it."""

    def __init__(self, clock, dispatch_s=2e-5, work_s=1.4e-4, round_trip_s=4.5e-4):
        self.clock, self.dispatch_s, self.work_s, self.round_trip_s = clock, dispatch_s, work_s, round_trip_s
        self.free_at, self.calls, self.synced = 0.0, 0, []

    def fn(self):
        self.clock.t += self.dispatch_s
        self.free_at = max(self.clock.t, self.free_at) + self.work_s
        self.calls += 1
        return self.calls, self.free_at  # the call's number and when the device is done with it

    def sync(self, out):
        self.clock.t = max(self.clock.t, out[1]) + self.round_trip_s
        self.synced.append(out[0])


@pytest.mark.parametrize("device,sync,expected", [("cpu", "auto", "synced"), ("tpu:0", "auto", "pipelined"),
                                                  ("cuda:0", "auto", "pipelined"), ("tpu:0", "synced", "synced"),
                                                  ("cpu", "pipelined", "pipelined")])
def test_auto_pipelines_on_an_accelerator_and_syncs_on_the_cpu(device, sync, expected):
    assert timing.policy(sync, device) == expected
    assert timing.resolved(budget("quick", sync=sync), device).sync == expected


def test_pipelined_blocks_sync_once_and_read_the_devices_own_time_per_call():
    """Synced, each call pays the round trip (0.61 ms a call here, as a TPU's 0.59); pipelined, a block's calls are
    dispatched back to back and its last output synced once: the round trip is at most ROUND_TRIP_SHARE of it."""
    medians = {}
    for policy in ("synced", "pipelined"):
        clock = FakeClock()
        device = FakeDevice(clock)
        m = measure(device.fn, device.sync, budget("quick", sync=policy, min_block_s=0.001), clock)
        medians[policy] = float(np.median(m.samples_s))
        sampled = device.synced[-len(m.samples_s) * (1 if policy == "pipelined" else m.block):]
        if policy == "pipelined":  # one sync a block, of its last call
            assert all(b - a == m.block for a, b in zip(sampled, sampled[1:])) and sampled[-1] == device.calls
        else:
            assert sampled == list(range(device.calls - len(sampled) + 1, device.calls + 1))  # every call
    assert medians["synced"] == pytest.approx(2e-5 + 1.4e-4 + 4.5e-4)
    assert 1.4e-4 < medians["pipelined"] <= 1.4e-4 * (1 + timing.ROUND_TRIP_SHARE) * 1.05


def test_a_pipeline_is_long_enough_to_hide_its_round_trip_and_no_longer_than_the_cap():
    b = budget("quick", min_block_s=0.001)
    assert timing.pipeline_length(0.59e-3, 0.14e-3, b) == 161  # 0.45 ms over 2% of 0.14 ms
    assert timing.pipeline_length(1e-4, 1e-4, b) == 10  # no round trip to hide: min_block_s of calls
    assert timing.pipeline_length(1.0, 1e-6, b) == timing.MAX_PIPELINE
    assert timing.pipeline_length(0.06, 0.03, b) == 2  # a "round trip" that is load: at most MAX_PIPELINE_S of calls

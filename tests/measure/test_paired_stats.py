"""What the measuring core's statistics give a paired comparison, on inputs whose answer is known: intervals bounded
by what the processes measured, oversubscribed threads, and a burst's timing with a fake clock."""
import math

import numpy as np
import pytest

from experiments.common.protocol import Measurement
from experiments.measure import stats, timing
from experiments.measure.meter import oversubscription


def test_the_interval_never_reaches_past_what_the_processes_measured():
    """Four processes at about 1 ms and one at 88 ms (read while another program ran): the bootstrap's interval
    reaches far below anything measured; bounded, it stays within the fastest ÷ s and the slowest × s, s their
    geometric SD, and stays multiplicative about its center."""
    medians = [1.0e-3, 1.1e-3, 0.95e-3, 1.05e-3, 88e-3]
    runs = [list(m * np.random.default_rng(i).lognormal(0, 0.02, 50)) for i, m in enumerate(medians)]
    raw = stats.rerun_interval(runs)
    process = [float(np.median(r)) for r in runs]
    s = math.exp(np.std(np.log(process), ddof=1))
    lo, hi = stats.bounded(raw, process)
    assert raw[0] < min(process) / s  # the bootstrap's own interval: below anything measured
    assert min(process) / s <= lo * (1 + 1e-9) and hi <= max(process) * s * (1 + 1e-9)
    assert math.sqrt(lo * hi) == pytest.approx(math.sqrt(raw[0] * raw[1]))
    summary = stats.summarize([Measurement(r, 1, 0.1, "ci") for r in runs], 1)
    assert summary.ci95_low_s == pytest.approx(lo) and summary.ci95_high_s == pytest.approx(hi)
    assert stats.bounded((1 / 1.04, 1.04), [0.95, 1.0, 1.05]) == pytest.approx((1 / 1.04, 1.04))  # inside: as is


def test_threads_beyond_the_free_cores_are_oversubscribed_with_the_setting_to_change():
    hint = oversubscription("torch", 2, 2, 1.0)
    assert hint.startswith("2 intra-op threads on 2 cores while other processes used 1.00 of the machine's 2")
    assert "framework.threads" in hint and "to 1" in hint and "close the other program" in hint
    assert "XLA" in oversubscription("jax", 2, 2, 0.9)
    assert oversubscription("torch", 2, 2, 0.1) is None  # the parent's polling and jiffies: not oversubscribed
    assert oversubscription("torch", 1, 2, 1.0) is None  # one thread beside one busy program
    assert oversubscription("torch", 1, 2, 1.5) == ("1 intra-op threads on 2 cores while other processes used 1.50 "
                                                     "of the machine's 2: close the other program")
    assert oversubscription("torch", None, 2, 2.0) is None
    # a worker on one of the machine's two cores (jax, framework.threads=1): others' use counts against the machine
    assert oversubscription("jax", 1, 1, 0.9, machine_cores=2) is None
    assert oversubscription("jax", 1, 1, 1.6, machine_cores=2).endswith("used 1.60 of the machine's 2: close the "
                                                                        "other program")


class FakeClock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def test_a_burst_times_blocks_for_about_its_length_and_syncs_each_call():
    clock, synced = FakeClock(), []

    def fn():
        clock.t += 1e-3
        return "out"

    samples = timing.burst(fn, synced.append, block=4, seconds=0.05, clock=clock)
    assert len(samples) == 13  # 13 blocks of 4 ms: the first to end past 50 ms
    assert samples == pytest.approx([1e-3] * 13) and len(synced) == 13 * 4
    assert timing.burst(fn, synced.append, block=1, seconds=0.0, clock=clock) == pytest.approx([1e-3])

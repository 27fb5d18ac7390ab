"""Framework-agnostic timing, run inside the worker: first call, warm-up, block sampling and the adaptive stop;
and a paired worker's bursts. A command that times in its own process (`agree`, `overhead`) stops between two calls
or blocks, outside the timed region, where its Ctrl-C waits (`common.interrupts`; in a worker, nothing is noted)."""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace
from typing import Any, Callable

import numpy as np

from experiments.common.interrupts import checkpoint
from experiments.common.protocol import Budget, Measurement
from experiments.measure.stats import median_ci

Clock = Callable[[], float]


def target(budget: Budget, between_sd: float | None) -> float:
    """The relative CI half-width at which a process may stop sampling.

    What a user sees is the re-run interval, set by the spread between processes (`between_sd`: the SD of the log
    of process medians, as far as the sweep knows it). Once a process's own CI is a fraction `between_k` of that
    spread, more samples cannot narrow the interval: at 0.5 its own error adds at most 3% to the spread's SD.
    """
    return max(budget.target_rel_ci, budget.between_k * between_sd) if between_sd else budget.target_rel_ci


def ci_ok(samples: list[float], budget: Budget, between_sd: float | None = None) -> bool:
    """True once the CI of the median is narrow enough (relative half-width) to stop."""
    if len(samples) < budget.min_samples:
        return False
    lo, hi = median_ci(samples)
    return (hi - lo) / 2 <= target(budget, between_sd) * float(np.median(samples))


def warm_up(fn: Callable[[], Any], sync: Callable[[Any], None], budget: Budget,
            clock: Clock = time.perf_counter) -> tuple[float, float]:
    """Call until `budget.warmup_s` and `budget.warmup_calls` are both reached; the seconds per call it took, and
    the seconds it took."""
    calls, t0 = 0, clock()
    while True:
        sync(fn())
        calls += 1
        checkpoint()
        elapsed = clock() - t0
        if elapsed >= budget.warmup_s and calls >= budget.warmup_calls:
            return max(elapsed / calls, 1e-9), elapsed


def policy(sync: str, device: str) -> str:
    """bench.sync on the device a worker measures on: auto is pipelined on an accelerator, where a synced call pays
    a round trip to the device that a loop dispatching ahead does not (LeNet bs128 inference on a TPU v5e: 0.59 ms
    synced, 0.14 ms pipelined), and synced on the CPU, where a call returns done and the numbers stay as they were."""
    return ("synced" if device == "cpu" else "pipelined") if sync == "auto" else sync


def resolved(budget: Budget, device: str) -> Budget:
    return replace(budget, sync=policy(budget.sync, device))


def start(fn: Callable[[], Any], sync: Callable[[Any], None], budget: Budget, clock: Clock = time.perf_counter,
          inspect: Callable[[Any], None] = lambda out: None) -> tuple[float, float, int]:
    """The first call (timed apart; `inspect` sees its output, untimed), then the warm-up, whose estimate of one
    call sets the block length (`pipeline_length` where pipelined): (first call s, warm-up s, calls per block)."""
    t0 = clock()
    out = fn()
    sync(out)
    first = clock() - t0
    inspect(out)
    del out
    per_call, warmup = warm_up(fn, sync, budget, clock)
    block = max(1, math.ceil(budget.min_block_s / per_call - 1e-6))  # tolerance: float noise
    if budget.sync == "pipelined":  # twice: a short pipeline's time per call still holds much of its round trip
        t0, block = clock(), max(2, block)
        for _ in range(2):
            block = pipeline_length(per_call, timed_pipeline(fn, sync, block, clock)[1], budget)
        warmup += clock() - t0
    return first, warmup, block


# A pipelined block pays one round trip to the device, at its end (its one sync): it holds calls enough that the
# round trip (a synced call's time less a pipelined one's) is at most this share of the block...
ROUND_TRIP_SHARE = 0.02
# ...and at most this many calls, whose outputs the device keeps until the sync, lasting at most this long beyond
# bench.min_block_s (a round trip under a millisecond is under 2% of it; on a busy CPU, where a sync is nothing, the
# two estimates differed by load alone and asked for 7 s blocks of a 31 ms step).
MAX_PIPELINE, MAX_PIPELINE_S = 1000, 0.05


def pipeline_length(synced_s: float, pipelined_s: float, budget: Budget) -> int:
    """Calls per pipelined block: at least `budget.min_block_s` of them, and enough to hide the round trip."""
    per_call = max(pipelined_s, 1e-9)
    round_trip = max(0.0, synced_s - per_call)
    longest = max(budget.min_block_s, MAX_PIPELINE_S) / per_call
    wanted = max(budget.min_block_s / per_call, min(longest, round_trip / (ROUND_TRIP_SHARE * per_call)))
    return max(1, min(MAX_PIPELINE, math.ceil(wanted - 1e-6)))


def timed_block(fn: Callable[[], Any], sync: Callable[[Any], None], block: int, clock: Clock) -> tuple[float, float]:
    """One sample, synced: `block` calls of `sync(fn())` timed together; (the clock at its end, seconds per call).
    The timed region holds the calls and their syncs only."""
    t0 = clock()
    for _ in range(block):
        sync(fn())
    t1 = clock()
    return t1, (t1 - t0) / block


def timed_pipeline(fn: Callable[[], Any], sync: Callable[[Any], None], block: int, clock: Clock) -> tuple[float, float]:
    """One sample, pipelined: `block` calls dispatched back to back, then one sync of the last output, as a loop runs
    them (a training step's state chained call to call, as its `fn` does). A device runs one process's programs in
    the order they were dispatched, so the last one done is every one done."""
    t0 = clock()
    for _ in range(block):
        out = fn()
    sync(out)
    t1 = clock()
    return t1, (t1 - t0) / block


TIMED = {"synced": timed_block, "pipelined": timed_pipeline}  # a sample, by policy (auto unresolved: synced)


@dataclass(frozen=True)
class Watch:
    """What looks on while an op is timed, from outside the timed region: `inspect` sees the first output (the worker
    checks which device it lives on); `meter` is read just before and just after the sampling (page faults, CPU
    time, ...), and the Measurement keeps the change."""

    inspect: Callable[[Any], None] = lambda out: None
    meter: Callable[[], dict[str, float]] = dict


def measure(fn: Callable[[], Any], sync: Callable[[Any], None], budget: Budget,
            clock: Clock = time.perf_counter, watch: Watch = Watch(), between_sd: float | None = None) -> Measurement:
    """Time `sync(fn())` per call: first call, warm-up, then blocks until the CI and the budget say stop, `watch`
    looking on. `between_sd`: the spread between processes so far, which sets how narrow this process's CI need be
    (`target`).
    """
    begin = clock()
    first, warmup, block = start(fn, sync, budget, clock, watch.inspect)
    samples: list[float] = []
    timed = TIMED.get(budget.sync, timed_block)
    before = watch.meter()
    begun = clock()
    while True:
        t1, per_call = timed(fn, sync, block, clock)
        samples.append(per_call)
        checkpoint()
        if t1 - begun >= budget.min_time_s and ci_ok(samples, budget, between_sd):
            reason = "ci"
        elif t1 - begun >= budget.max_time_s and len(samples) >= min(budget.min_samples, 3):
            reason = "time"
        elif len(samples) >= budget.max_samples:
            reason = "samples"
        else:
            continue
        after = watch.meter()
        change = {k: after[k] - before[k] for k in after}
        return Measurement(samples, block, first, reason, clock() - begin, change, warmup, t1 - begun)


def burst(fn: Callable[[], Any], sync: Callable[[Any], None], block: int, seconds: float,
          clock: Clock = time.perf_counter, sync_policy: str = "synced") -> list[float]:
    """Blocks of `sync(fn())` for about `seconds` (at least one block), as `measure` samples them (`sync_policy`, as
    resolved): per-call seconds of each block. A paired worker's turn (harness/pairs.py): the other worker is stopped
    meanwhile."""
    samples: list[float] = []
    timed = TIMED.get(sync_policy, timed_block)
    end = clock() + seconds
    while True:
        t1, per_call = timed(fn, sync, block, clock)
        samples.append(per_call)
        if t1 >= end:
            return samples

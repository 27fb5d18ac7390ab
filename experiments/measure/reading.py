"""A point's reading: the results of its worker processes merged and judged, as typed data, before anything is
flattened for the store. It owns the merge across processes, the derived FLOP rates and MFU, and the noisy and
unstable rules with their thresholds and hint. Parent side: it runs where the processes' results meet, on the
measuring core's statistics (`measure.stats`).
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass, field, replace
from pathlib import Path

from experiments.common.columns import DERIVED
from experiments.common.protocol import Measurement, OpResult, Point, PointResult, Stats, metric_fields
from experiments.measure.flops import achieved_tflops
from experiments.measure.machine import MachineCheck
from experiments.measure.peaks import Peak, peak, raised, vendor_tflops
from experiments.measure.stats import summarize
from experiments.stats.outliers import unmeasured
from experiments.stats.paired import PairedComparison

# Other processes' CPU use while sampling above which a point is tagged noisy=true: on 2 cores, another busy
# process made torch's OpenMP threads wait on each other (a 0.3 ms MLP inference read at tens of ms).
NOISY_CORES = 0.2
# An op is flagged unstable=true when a re-run could read far from this one: its re-run interval spans more than
# UNSTABLE_INTERVAL (high / low: a re-run may read over 1.7× away), or its processes' medians differ by more than
# UNSTABLE_SPREAD (slowest / fastest). Chosen so the flag separates: on a 2-core VM whose intervals are typically
# ×2 wide, it marked 1 of the README sweep's 8 points and 24 of seed 000's 100; ×1.5 marked nearly all of them.
UNSTABLE_INTERVAL = 3.0
UNSTABLE_SPREAD = 2.0


@dataclass(frozen=True)
class OpReading:
    """One measured op over the point's processes: the merged result, each process's measurement, what is derived."""

    result: OpResult  # the statistics of every process's samples, each metric() field combined
    measurements: tuple[Measurement, ...]  # one per process, in the order they ran
    achieved_tflops: float | None = None  # the op's FLOPs per call over the median
    mfu: float | None = None  # achieved over the machine's peak (`Reading.peak`)
    mfu_vendor: float | None = None  # achieved over the data-sheet peak of a known GPU

    @property
    def stats(self) -> Stats:
        return self.result.stats

    @property
    def unstable(self) -> bool:
        """Whether a re-run could read far from this run (the bounds above)."""
        s = self.stats
        return s.ci95_high_s / s.ci95_low_s > UNSTABLE_INTERVAL or s.process_spread > UNSTABLE_SPREAD

    def metrics(self) -> dict[str, float]:
        """The op's numbers by name: the worker's (`OpResult.metrics`), then the derived ones that are known."""
        derived = {name: getattr(self, name) for name in DERIVED}
        return self.result.metrics() | {k: v for k, v in derived.items() if v is not None}


@dataclass(frozen=True)
class Replaced:
    """A process of the point measured again by one more worker (the sweep's load rule, `outliers.to_replace`): its
    result stays in the raw data with the reason."""

    process: int  # 1-based, in the order the point's processes ran
    reason: str
    result: PointResult


@dataclass(frozen=True)
class Paired:
    """How a point was compared with its cell's baseline, paired (harness/pairs.py): each op's speedup over the
    trials in which both took turns, judged with the cell's other comparisons."""

    label: str  # this variant's name in its cell: `jax-jit fp32`, plus what tells it from a namesake
    baseline: str  # the variant compared against (its label); this point's own, where it is the baseline
    ops: dict[str, PairedComparison] = field(default_factory=dict)  # op -> this variant's time over the baseline's
    differs: tuple[str, ...] = ()  # what differs from the baseline besides the variant itself (threads, host, ...)
    repro: dict[str, str] = field(default_factory=dict)  # op -> the command that measures just that cell again
    # how it took turns with the baseline: `bursts`, `in-process` or `alternating` (harness/designs.py); on the
    # baseline's own points, every design of its cell (`bursts+in-process`)
    design: str = "bursts"

    @property
    def is_baseline(self) -> bool:
        return self.label == self.baseline


# The steady-state time and what follows from it: an unmeasured op withholds these and keeps the rest (its compile
# count, first calls, samples, the spread between its processes, memory, the cores others used).
ESTIMATES = ("median_s", "p25_s", "p75_s", "ci95_low_s", "ci95_high_s", "min_s", "mean_s", "std_s",
             "throughput_samples_per_s") + DERIVED


@dataclass(frozen=True)
class Unmeasured:
    """An op that gets no time here: why, and the op as its processes measured it (kept in the raw data)."""

    reason: str
    op: OpReading

    def metrics(self) -> dict[str, float]:
        return {k: v for k, v in self.op.metrics().items() if k not in ESTIMATES}


@dataclass(frozen=True)
class Reading:
    """One point as its processes measured it, merged and judged."""

    point: Point
    processes: int  # results in, failed ones included
    device: str = "n/a"  # where it ran: the first finished process's
    environment: dict[str, str] = field(default_factory=dict)  # the first finished process's allow-listed record
    ops: dict[str, OpReading] = field(default_factory=dict)  # the ops measured, in the point's order
    skipped: dict[str, str] = field(default_factory=dict)  # op -> why it could not be measured here
    failure: str | None = None  # why the point failed, and in which process: a fault in any process fails it
    stderr_tail: str = ""  # that process's last output
    interrupted: str | None = None  # the signal that stopped the point while it was measured
    peak: Peak | None = None  # what MFU divides by: this machine's, device's and precision's (`measure.peaks`)
    machine: dict[str, float] = field(default_factory=dict)  # the machine's numbers, median over processes
    noisy: bool = False  # other processes used more than NOISY_CORES while some op was sampled
    unstable: tuple[str, ...] = ()  # the ops a re-run could read far from
    hint: str = ""  # what to do about the first unstable op
    unmeasured: dict[str, Unmeasured] = field(default_factory=dict)  # op -> why no number is given (10× apart)
    oversubscribed: dict[str, str] = field(default_factory=dict)  # op -> in how many processes, why, what to set
    replaced: tuple[Replaced, ...] = ()  # processes measured again, each with its reason
    paired: Paired | None = None  # measured paired with its cell's other variants; None: on its own

    @property
    def outcome(self) -> str:
        """ok, skipped (nothing could be measured here), failed or interrupted."""
        if self.interrupted:
            return "interrupted"
        return "failed" if self.failure is not None else "ok" if self.ops or self.unmeasured else "skipped"

    @property
    def background_cores(self) -> float:
        """The most cores other processes used while any op of the point was sampled."""
        return max([o.result.background_cores for o in self.ops.values() if o.result.background_cores is not None]
                   + [u.op.result.background_cores or 0.0 for u in self.unmeasured.values()], default=0.0)


def read(point: Point, results: list[PointResult], machine: MachineCheck | None = None,
         replaced: tuple[Replaced, ...] = (), peaks: Path | None = None, name: str = "") -> Reading:
    """The point from each process's result (or why a process has none). `machine`: the sweep's machine check, for
    the hint of an unstable point; `replaced`: the processes the results no longer hold, kept with their reason;
    `peaks`: the sweep's calibrated peaks (MFU's denominator; `name`: the point's, where its rate raises the peak).
    An op whose processes disagree by `outliers.UNMEASURED_SPREAD` or more gets no number: it is unmeasured here."""
    ok = [r for r in results if r.failure is None]
    failed = [r for r in results if r.failure is not None]
    reading = Reading(point, len(results), replaced=replaced)
    if failed:
        which = f" (process {results.index(failed[0]) + 1} of {len(results)})" if len(results) > 1 else ""
        reading = replace(reading, failure=f"{failed[0].failure}{which}", stderr_tail=failed[0].stderr_tail)
    if not ok:
        return reading
    env = ok[0].environment
    peak = machine_peak(peaks, env, ok)
    ops, skipped = measured(point, ok, vendor_tflops(env.get("device_name", ""), env.get("precision_policy", "")))
    best = max((o for o in ops.values() if o.achieved_tflops), key=lambda o: o.achieved_tflops, default=None)
    if best is not None and peak is not None and best.achieved_tflops > peak.tflops:
        peak = raised(peaks, env, best.achieved_tflops, name or f"bs{point.batch_size}")
    ops = {op: replace(o, mfu=o.achieved_tflops / peak.tflops if o.achieved_tflops and peak else None)
           for op, o in ops.items()}
    far = {op: Unmeasured(why, o) for op, o in ops.items()
           if (why := unmeasured([statistics.median(m.samples_s) for m in o.measurements]))}
    keys = sorted(set().union(*(r.machine for r in ok)))
    reading = replace(reading, device=ok[0].device, environment=env, skipped=skipped, peak=peak,
                      ops={op: o for op, o in ops.items() if op not in far}, unmeasured=far,
                      oversubscribed=oversubscribed(point, ok),
                      machine={k: statistics.median(r.machine[k] for r in ok if k in r.machine) for k in keys})
    noisy = reading.background_cores > NOISY_CORES
    shaky = tuple(op for op, o in reading.ops.items() if o.unstable)
    said = hint(shaky[0], reading.ops[shaky[0]], noisy, machine, reading.oversubscribed.get(shaky[0])) if shaky else ""
    return replace(reading, noisy=noisy, unstable=shaky, hint=said)


def machine_peak(peaks: Path | None, env: dict[str, str], ok: list[PointResult]) -> Peak | None:
    """The peak MFU divides by: the sweep's for this machine, device and precision; without a sweep's peaks (a
    single worker's result), the worker's own calibration."""
    if (found := peak(peaks, env)) is not None:
        return found
    own = [r.peak_tflops for r in ok if r.peak_tflops]
    return Peak(statistics.median(own), "calibrated by this point's own framework") if own else None


def measured(point: Point, ok: list[PointResult],
             vendor: float | None) -> tuple[dict[str, OpReading], dict[str, str]]:
    """The ops the processes measured, merged, with their FLOP rates (MFU is the caller's: the peak may move); and
    the skipped ones with their reason."""
    ops, skipped = {}, {}
    for op in point.ops:
        rs = [r.ops[op] for r in ok if op in r.ops]  # paired: a cell's later trials may not hold every op
        if not rs:
            continue
        if rs[0].status != "ok":
            skipped[op] = rs[0].reason
            continue
        merged = merge(rs, point.batch_size)
        achieved = achieved_tflops(merged.flops, merged.stats.median_s) if merged.flops is not None else None
        ops[op] = OpReading(merged, tuple(r.measurement for r in rs), achieved, None,
                            achieved / vendor if achieved is not None and vendor else None)
    return ops, skipped


def oversubscribed(point: Point, ok: list[PointResult]) -> dict[str, str]:
    """Per op, where its intra-op threads outnumbered the cores free in some process: in how many, and the first
    one's why and what to set (`meter.oversubscription`)."""
    out = {}
    for op in point.ops:
        said = [r.ops[op].oversubscribed for r in ok if op in r.ops and r.ops[op].oversubscribed]
        if said:
            out[op] = f"in {len(said)} of {len(ok)} processes, {said[0]}" if len(ok) > 1 else said[0]
    return out


def merge(results: list[OpResult], batch: int) -> OpResult:
    """One op over a point's worker processes: statistics of all their samples, each metric combined (one process
    keeps the statistics it reported; a runner in another language reports none)."""
    first = results[0]
    if first.status != "ok" or (len(results) == 1 and first.stats is not None):
        return first
    merged = {f.name: f.metadata["combine"]([getattr(r, f.name) for r in results])
              for f in metric_fields() if all(getattr(r, f.name) is not None for r in results)}
    return OpResult("ok", device=first.device, stats=summarize([r.measurement for r in results], batch), **merged)


def hint(op: str, o: OpReading, noisy: bool, machine: MachineCheck | None = None, crowded: str | None = None) -> str:
    """What to do about an unstable point, in one line (`crowded`: why its threads outnumbered the free cores)."""
    s = o.stats
    apart = f", its processes {s.process_spread:.2f}× apart" if s.process_spread > 1 else ""
    why = f"{op}: a re-run may read {s.ci95_low_s * 1e3:.4g}–{s.ci95_high_s * 1e3:.4g} ms{apart}"
    if crowded:
        return f"{why}; its threads were oversubscribed {crowded}"
    if noisy:
        return f"{why}; other processes used the CPU meanwhile: measure on a quiet machine"
    if machine is not None and machine.noisy:
        return (f"{why}; the machine itself drifts (a fixed loop's windows spread {machine.window_spread:.2f}×): "
                "measure on a quieter machine, or more processes (bench.processes=10)")
    return f"{why}; the machine itself may be noisy: try bench=thorough, or more processes (bench.processes=10)"

"""What crosses the process boundary between the parent and a worker, as typed data: the request (a framework
set-up, a model, a budget and the points), and the worker's result per point (one JSON line each), down to every
sample; and, for a profile request, where one step's time went. Serialized only here, by `to_json`/`from_json`.

A new per-op number is one field on `OpResult` declared with `metric()`, and the code that computes it:
`OpResult.metrics()` hands it on as the MLflow metric `<op>_<field>`. A profile's numbers come from
`OpProfile.metrics()` the same way.
"""
from __future__ import annotations

import dataclasses
import enum
import json
import statistics
import types
import typing
from dataclasses import dataclass, field, fields
from typing import Any, Callable, Union

from experiments.common.devices import EXCLUSIVE, platform


@dataclass
class Budget:
    """How long to measure one op. No defaults here: the bench config group (conf/bench/*.yaml) sets them all."""

    warmup_s: float  # steady-state warm-up after the first call...
    warmup_calls: int  # ...and at least this many calls (caches and allocators settle over a few calls)
    min_samples: int
    max_samples: int
    min_time_s: float  # sample at least this long, whatever the CI says: one short window misses slow drift
    max_time_s: float  # sampling budget per op, warm-up excluded
    target_rel_ci: float  # stop once the 95% CI of the median is within ±this fraction...
    min_block_s: float  # short calls are repeated in blocks at least this long
    between_k: float  # ...or within ±between_k × the spread between processes (timing.target)
    between_prior: float  # that spread (SD of log process medians) before two processes have measured a point
    sync: str  # auto, synced (each call waits for its result) or pipelined (a block's calls, one wait): timing.policy

    @classmethod
    def of(cls, bench: "Budget") -> "Budget":
        """The budget part of a bench config (`common.config.BenchConf`, which also holds the harness's keys)."""
        return cls(**{f.name: getattr(bench, f.name) for f in fields(cls)})


@dataclass(frozen=True)
class Measurement:
    """Raw result of timing one op: per-call seconds, one value per block."""

    samples_s: list[float]
    block: int  # calls per sample
    first_call_s: float  # trace/compile plus the first run
    stop_reason: str  # "ci", "time" or "samples"
    elapsed_s: float = 0.0  # wall time of the whole measurement, first call and warm-up included
    meter: dict[str, float] = field(default_factory=dict)  # the change of `meter()` over the sampling
    warmup_s: float = 0.0  # of which the warm-up
    sampling_s: float = 0.0  # and the samples

    @property
    def calls(self) -> int:
        """Calls timed in the samples (warm-up and first call excluded)."""
        return self.block * len(self.samples_s)


@dataclass(frozen=True)
class Stats:
    median_s: float
    p25_s: float
    p75_s: float
    ci95_low_s: float
    ci95_high_s: float
    min_s: float
    mean_s: float
    std_s: float
    n_samples: int
    first_call_s: float  # the cold first call: compile (or trace) plus one run, in the process that filled the cache
    throughput_samples_per_s: float
    process_spread: float = 1.0  # the slowest process's median over the fastest one's
    first_call_warm_s: float | None = None  # the later processes' first calls (median), with the compile cache warm


STATS = tuple(f.name for f in fields(Stats))  # the per-op metric names: `<op>_<stat>`


class Json:
    """One `to_json`/`from_json` for a dataclass tree (nested dataclasses, lists, tuples, dicts, optionals)."""

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, text: str):
        return _build(cls, json.loads(text))


def _build(tp, value):
    """`value` (parsed JSON) as an instance of the type hint `tp`."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if value is None:
        return None
    if origin in (Union, types.UnionType):
        return _build(next(a for a in args if a is not type(None)), value)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return tp(value)
    if dataclasses.is_dataclass(tp):
        value = tp.upgraded(value) if hasattr(tp, "upgraded") else value  # an older layout of its JSON
        hints = typing.get_type_hints(tp)
        return tp(**{f.name: _build(hints[f.name], value[f.name]) for f in dataclasses.fields(tp) if f.name in value})
    if origin in (list, tuple):
        return origin(_build(args[0], v) for v in value)
    if origin is dict:
        return {k: _build(args[1], v) for k, v in value.items()}
    return value


def metric(combine: Callable[[list], float] = statistics.median):
    """A per-op number that lands in MLflow as `<op>_<name>` (None: not measured, not logged).

    `combine` folds the values of a point's measuring processes into one (the median, or e.g. max for a peak).
    """
    return field(default=None, metadata={"metric": True, "combine": combine})


@dataclass(frozen=True)
class Point(Json):
    """One measured point of a job: a batch size and the ops measured at it."""

    batch_size: int
    ops: tuple[str, ...]


@dataclass(frozen=True)
class Setup(Json):
    """How a framework is set up in the worker, once, before any array exists."""

    precision: str  # fp32, bf16, fp16, fp64
    device: str  # auto, cpu or gpu, as configured
    tf32: bool = False
    compile: bool = False  # jax: jit; torch: torch.compile
    compile_mode: str = "default"  # torch.compile's mode: default or reduce-overhead (CUDA graphs)
    memory_format: str = "contiguous"  # torch: contiguous or channels_last; jax: nhwc
    threads: int | None = None  # intra-op threads (framework.threads); None: the framework's own choice

    @property
    def exclusive(self) -> bool:
        """Whether the worker holds a device only one process at a time may open: the device as resolved before any
        worker starts (`device=tpu`, or `auto` where it resolves to a TPU)."""
        return platform(self.device) in EXCLUSIVE  # one process on it at a time (harness/designs.py)


@dataclass(frozen=True)
class Request(Json):
    """What the harness asks of one worker: a framework set-up, a model, and the points to time."""

    framework: str
    setup: Setup
    model: dict[str, Any]  # models.load(**model): its name and keys
    seed: int
    budget: Budget
    points: tuple[Point, ...]
    peaks: str | None = None  # the sweep's cache of calibrated peak TFLOP/s per environment (a JSON file)
    between: dict[str, float] = field(default_factory=dict)  # op -> the spread between processes so far
    profile_dir: str | None = None  # a profile request: profile each op instead of timing it, files go here
    paired: str | None = None  # a paired request: serve the parent's commands (prepare an op, burst) on this socket
    flops: dict[str, int] = field(default_factory=dict)  # "op:batch" -> FLOPs per call the worker can't count itself
    variants: tuple[Setup, ...] = ()  # paired: more set-ups this worker serves in turn, variants sharing one process


@dataclass(frozen=True)
class Export(Json):
    """What the parent asks of `python -m experiments.measure.step_export`: one op of a point, built as a worker
    builds it, exported to files `out`.* that the framework alone can load (a standalone script's)."""

    framework: str
    setup: Setup
    model: dict[str, Any]  # models.declared(**model)
    seed: int
    op: str
    batch_size: int
    out: str


# One vocabulary for both frameworks: every profiled op falls in one of these categories (the tables are
# experiments/measure/categories.py), and `overhead` is the step's wall time outside every op.
CATEGORIES = ("conv", "matmul", "attention", "recurrent", "elementwise", "norm", "pool", "loss", "optimizer", "copy",
              "other")
PARTS = CATEGORIES + ("overhead",)  # where one step's wall time goes: the metrics `<op>_time_<part>_s`


@dataclass(frozen=True)
class ProfiledOp(Json):
    """One op of the profile's top table, per step (the median over the profiled steps)."""

    name: str
    category: str
    calls: float
    self_s: float  # time in this op and what it calls, not counted for any other op (overlaps split evenly)


@dataclass
class OpProfile(Json):
    """Where one step's wall time went, from the most typical profiled step: the parts sum to `wall_s`."""

    wall_s: float
    parts_s: dict[str, float]  # every one of PARTS, in seconds
    step_walls_s: list[float]  # every profiled step's wall time
    top: list[ProfiledOp]  # the ops that took the most time
    elapsed_s: float  # profiling this op took: build, first call, warm-up, profiled steps, parsing, files
    notes: list[str] = field(default_factory=list)  # what to know when reading it (unbounded `other`, ...)
    device_s: float | None = None  # on an accelerator, its own time in the step: its ops' (the step less overhead)

    def metrics(self) -> dict[str, float]:
        device = {"profile_device_s": self.device_s} if self.device_s is not None else {}
        return {f"time_{p}_s": self.parts_s.get(p, 0.0) for p in PARTS} | {
            "profile_wall_s": self.wall_s, "profile_steps": len(self.step_walls_s), "profile_elapsed_s": self.elapsed_s
        } | device


@dataclass
class OpResult(Json):
    """One op of one point: measured (`ok`) or not possible here (`skipped`, with the reason)."""

    status: str  # "ok" or "skipped"
    reason: str = ""
    device: str = ""  # where the outputs lived
    measurement: Measurement | None = None  # every per-call sample, the block length, the stop reason
    stats: Stats | None = None
    calls_per_block: int | None = metric()  # calls timed together per sample: timer overhead shrinks with it
    flops: int | None = metric()  # per call, counted from the model's layers (experiments.flops)
    compiles: int | None = metric(max)  # jit/torch.compile compilations over the whole measurement: 1 when sound
    compile_cache_hits: int | None = metric(sum)  # programs loaded from the sweep's compile cache, not compiled
    page_faults_per_call: float | None = metric()  # minor faults while sampling, per call (allocator churn)
    peak_mem_bytes: int | None = metric(max)  # the host's: resident high-water growth over the op (docs/measuring.md)
    device_peak_mem_bytes: int | None = metric(max)  # the device's peak bytes in use (an accelerator's; not the CPU)
    background_cores: float | None = metric(max)  # other processes' CPU use while sampling, in cores
    threads: int | None = metric(max)  # the op's intra-op threads (torch's, or XLA's: the cores it may run on)
    oversubscribed: str | None = None  # why and what to set, where those threads outnumbered the free cores
    profile: OpProfile | None = None  # a profile request's answer instead of timings

    def metrics(self) -> dict[str, float]:
        """The numbers MLflow gets for this op: the stats, every `metric()` field that was measured, the profile's."""
        out = dataclasses.asdict(self.stats) if self.stats else {}
        out |= {f.name: getattr(self, f.name) for f in metric_fields() if getattr(self, f.name) is not None}
        out |= self.profile.metrics() if self.profile else {}
        return {k: float(v) for k, v in out.items() if v is not None}


def metric_fields() -> list[dataclasses.Field]:
    return [f for f in dataclasses.fields(OpResult) if f.metadata.get("metric")]


METRICS = tuple(f.name for f in metric_fields())  # besides STATS


@dataclass
class PointResult(Json):
    """The worker's line for one point; or, written by the harness, why there is none (`failure`)."""

    batch_size: int
    device: str = "n/a"
    environment: dict[str, str] = field(default_factory=dict)  # allow-listed identity: versions, device, flags
    ops: dict[str, OpResult] = field(default_factory=dict)
    peak_tflops: float | None = None  # what a large matmul sustains here, this framework and precision
    failure: str | None = None  # a crash, an OOM kill, a timeout: the point failed
    stderr_tail: str = ""  # the worker's last output, kept with a failure
    startup_s: float | None = None  # from the worker's start to its first op: interpreter, imports, set-up
    machine: dict[str, float] = field(default_factory=dict)  # numeric facts: core counts, memory, load average


# A paired request (`Request.paired`): the worker connects to the request's socket and answers `Ready` (one per
# set-up it serves: the request's, then each of `Request.variants`), then, per `Command`, prepares one op of one point
# for one set-up as a timed worker would (`Prepared`; the ops of another cell are freed first), times one `Burst` of
# it, or ends. One JSON object per line on the socket.


@dataclass(frozen=True)
class Command(Json):
    """The parent's word to a paired worker."""

    do: str  # "prepare", "burst" or "end"
    seconds: float = 0.0  # a burst: time blocks of calls for about this long
    batch_size: int = 0  # prepare: the point's batch size...
    op: str = ""  # ...and the op
    variant: int = 0  # prepare, burst: which set-up (0: the request's own; k: `Request.variants[k - 1]`)
    layout: int = 0  # prepare: where in memory the op's buffers land, drawn per trial (measure/worker.py: shifted)


@dataclass
class Ready(Json):
    """A paired worker, configured and connected: what it records of itself before any op."""

    environment: dict[str, str] = field(default_factory=dict)
    machine: dict[str, float] = field(default_factory=dict)
    startup_s: float | None = None
    threads: int | None = None  # the ops' intra-op threads
    cores: int | None = None  # the cores the worker may run on
    peak_tflops: float | None = None  # what a large matmul sustains here (the request's peaks cache)


@dataclass
class Prepared(Json):
    """A paired worker's op, ready to burst: what a timed worker records of it before sampling."""

    status: str  # "ok" or "skipped"
    reason: str = ""
    device: str = ""
    first_call_s: float = 0.0
    warmup_s: float = 0.0
    block: int = 1  # calls per sample, from the warm-up's estimate of one call
    compiles: int | None = None
    compile_cache_hits: int | None = None
    flops: int | None = None  # per call, as a timed worker counts them
    peak_mem_bytes: int | None = None  # from before the build to the end of the warm-up, as a timed worker's
    device_peak_mem_bytes: int | None = None  # the device's, where it is an accelerator


@dataclass
class Burst(Json):
    """One burst: per-call seconds of each block, and the change of `meter()` over it."""

    samples_s: list[float]
    meter: dict[str, float] = field(default_factory=dict)
    compiles: int | None = None  # compilations so far in the worker: still the one of its preparation

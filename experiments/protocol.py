"""What crosses a process boundary, as typed data: the harness's request to the measuring child, and the
child's result per point (one JSON line each). Serialized only here, by `to_json`/`from_json`.

A new per-op number is one field on `OpResult` declared with `metric()`, and the code that computes it:
`OpResult.metrics()` hands it on as the MLflow metric `<op>_<field>`.
"""
from __future__ import annotations

import dataclasses
import json
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Union

from experiments.timing import Budget, Measurement, Stats


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
    if dataclasses.is_dataclass(tp):
        hints = typing.get_type_hints(tp)
        return tp(**{f.name: _build(hints[f.name], value[f.name]) for f in dataclasses.fields(tp) if f.name in value})
    if origin in (list, tuple):
        return origin(_build(args[0], v) for v in value)
    if origin is dict:
        return {k: _build(args[1], v) for k, v in value.items()}
    return value


def metric():
    """A per-op number that lands in MLflow as `<op>_<name>` (None: not measured, not logged)."""
    return field(default=None, metadata={"metric": True})


@dataclass(frozen=True)
class Point(Json):
    """One measured point of a job: a batch size and the ops the seed measures at it."""

    batch_size: int
    ops: tuple[str, ...]


@dataclass(frozen=True)
class Request(Json):
    """What the harness asks of one measuring child: a framework set-up, a model, and the points to time."""

    framework: str
    compile: bool
    model: dict[str, Any]  # models.load(**model): its name and keys
    precision: str
    tf32: bool
    device: str  # auto, cpu or gpu, as configured
    seed: int
    budget: Budget
    points: tuple[Point, ...]


@dataclass
class OpResult(Json):
    """One op of one point: measured (`ok`) or not possible here (`skipped`, with the reason)."""

    status: str  # "ok" or "skipped"
    reason: str = ""
    device: str = ""  # where the outputs lived
    measurement: Measurement | None = None  # every per-call sample, the block length, the stop reason
    stats: Stats | None = None
    calls_per_block: int | None = metric()  # calls timed together per sample: timer overhead shrinks with it

    def metrics(self) -> dict[str, float]:
        """The numbers MLflow gets for this op: the stats, then every `metric()` field that was measured."""
        out = dataclasses.asdict(self.stats) if self.stats else {}
        out |= {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                if f.metadata.get("metric") and getattr(self, f.name) is not None}
        return {k: float(v) for k, v in out.items()}


@dataclass
class PointResult(Json):
    """The child's line for one point; or, written by the harness, why there is none (`failure`)."""

    batch_size: int
    device: str = "n/a"
    environment: dict[str, str] = field(default_factory=dict)
    ops: dict[str, OpResult] = field(default_factory=dict)
    failure: str | None = None  # a crash, an OOM kill, a timeout: the point failed
    stderr_tail: str = ""  # the child's last output, kept with a failure

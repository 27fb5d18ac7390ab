"""Seed 000's lines: TIMING and METADATA, as SciMLBenchmarks' "Simple Neural Networks" page (the SciML page) reads
them, plus nnbench's SAMPLES.

The SciML page reads its Python child's stdout with `eachline`, splits each line on TAB and accepts exactly
`TIMING<TAB>framework<TAB>model<TAB>operation<TAB>batch<TAB>seconds` (batch `parse(Int, ...)`, seconds
`parse(Float64, ...)`) and `METADATA<TAB>key<TAB>value`; any other line, an empty one included, stops it with
`error("Unexpected Python benchmark output: $line")`. `parse` applies the same rules, and is stricter where the
page takes what no timing can be: a batch below 1, seconds not finite and positive, an empty name, a key given
twice (the page's Dict keeps the last silently); and it takes numbers only in plain decimal forms (`32`, `0.5`,
`4.3e-05`; not `+32`, ` 32`, `0x20`, `Inf`), which Julia parses to the same values.
SAMPLES (raw per-call seconds, comma-separated) is nnbench's extension for runners; `strict=True` rejects it,
as the page does. Validate a runner's output: `python runners/reference_runner.py ... | nnbench sciml`. `results`
reads parsed lines as a worker's results, for a runner in a sweep and for `nnbench import`.
"""
from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from experiments.common.protocol import Measurement, OpResult, Point, PointResult

FIELDS = {"TIMING": 6, "METADATA": 3, "SAMPLES": 6}
QUOTE = 300  # characters of a bad line quoted in the error (a SAMPLES line can be long)
_INT = re.compile(r"[0-9]+")  # a subset of what Julia's parse(Int, s) accepts (no sign, no spaces, no 0x)
_FLOAT = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")  # likewise for parse(Float64, s)

Key = tuple[str, str, str, int]  # (framework, model, operation, batch): the page's python_time arguments


class BadLine(ValueError):
    """A line the SciML page (or nnbench) would reject; the message quotes it with its line number."""


@dataclass(frozen=True)
class Timing:
    framework: str
    model: str
    op: str
    batch: int
    seconds: float  # median per call

    @property
    def key(self) -> Key:
        return self.framework, self.model, self.op, self.batch


@dataclass(frozen=True)
class Samples:
    framework: str
    model: str
    op: str
    batch: int
    seconds: tuple[float, ...]  # every per-call sample, in time order

    @property
    def key(self) -> Key:
        return self.framework, self.model, self.op, self.batch


@dataclass
class Parsed:
    timings: list[Timing] = field(default_factory=list)
    metadata: dict[str, str] = field(default_factory=dict)
    samples: list[Samples] = field(default_factory=list)

    def time(self, framework: str, model: str, op: str, batch: int) -> float:
        """The SciML page's `python_time`: a KeyError where the page's Dict lookup would fail."""
        return {t.key: t.seconds for t in self.timings}[(framework, model, op, batch)]


def _text(value: str, what: str) -> str:
    if not value or any(c in value for c in "\t\r\n"):
        raise ValueError(f"{what} must be non-empty and hold no tab or line break (got {value!r})")
    return value


def _seconds(value: float) -> str:
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"seconds must be finite and positive (got {value!r})")
    return repr(float(value))  # the shortest text that reads back as the same float, in Julia too


def _point(framework: str, model: str, op: str, batch: int) -> list[str]:
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise ValueError(f"batch must be a positive int (got {batch!r})")
    return [_text(framework, "framework"), _text(model, "model"), _text(op, "operation"), str(batch)]


def format_timing(t: Timing) -> str:
    return "\t".join(["TIMING", *_point(t.framework, t.model, t.op, t.batch), _seconds(t.seconds)])


def format_samples(s: Samples) -> str:
    if not s.seconds:
        raise ValueError("a SAMPLES line needs at least one sample")
    return "\t".join(["SAMPLES", *_point(s.framework, s.model, s.op, s.batch), ",".join(map(_seconds, s.seconds))])


def format_metadata(key: str, value: str) -> str:
    """The value may be empty; like the key it may hold no tab or line break."""
    if any(c in value for c in "\t\r\n"):
        raise ValueError(f"metadata value must hold no tab or line break (got {value!r})")
    return "\t".join(["METADATA", _text(key, "metadata key"), value])


def _lines(text: str) -> list[str]:
    """Julia's `eachline(IOBuffer(text))`: a final line break ends the last line, it does not start an empty one."""
    *lines, last = text.split("\n")
    return [line + "\n" for line in lines] + ([last] if last else [])


def _read(line: str, strict: bool) -> Timing | Samples | tuple[str, str]:
    """One line as the SciML page splits it; a ValueError says why it is rejected."""
    fields = line.split("\t")
    kind = fields[0]
    if kind not in FIELDS or (strict and kind == "SAMPLES"):
        allowed = "TIMING or METADATA" if strict else "TIMING, METADATA or SAMPLES"
        raise ValueError(f"not a {allowed} line" + (" (SAMPLES is nnbench's extension)" if kind == "SAMPLES" else ""))
    if len(fields) != FIELDS[kind]:
        raise ValueError(f"{kind} needs {FIELDS[kind]} tab-separated fields, got {len(fields)}")
    if "" in fields[1:-1]:
        raise ValueError("empty field")
    if kind == "METADATA":
        return fields[1], fields[2]
    _, framework, model, op, batch, seconds = fields
    if not _INT.fullmatch(batch) or int(batch) < 1:
        raise ValueError(f"batch {batch!r} is not a positive integer")
    values = seconds.split(",")
    for v in values if kind == "SAMPLES" else [seconds]:
        if not _FLOAT.fullmatch(v) or not (math.isfinite(float(v)) and float(v) > 0):
            raise ValueError(f"seconds {v!r} is not a finite positive decimal number")
    if kind == "TIMING":
        return Timing(framework, model, op, int(batch), float(seconds))
    return Samples(framework, model, op, int(batch), tuple(map(float, values)))


def parse(lines: Iterable[str] | str, strict: bool = False) -> Parsed:
    """Lines (or a whole text) as the SciML page reads them; `strict`: only what the page itself accepts."""
    out, seen = Parsed(), {}
    for n, raw in enumerate(_lines(lines) if isinstance(lines, str) else lines, 1):
        line = raw.removesuffix("\n").removesuffix("\r") if raw.endswith("\n") else raw  # eachline drops \n, \r\n
        try:
            item = _read(line, strict)
            key = ("METADATA", item[0]) if isinstance(item, tuple) else (type(item).__name__, *item.key)
            if key in seen:
                raise ValueError(f"repeats the key of line {seen[key]}")
        except ValueError as e:
            shown = repr(line[:QUOTE]) + (f" ... ({len(line)} characters)" if len(line) > QUOTE else "")
            raise BadLine(f"line {n}: {e}: {shown}") from None
        seen[key] = n
        match item:
            case Timing():
                out.timings.append(item)
            case Samples():
                out.samples.append(item)
            case (k, v):
                out.metadata[k] = v
    return out


def results(parsed: Parsed, name: str, model: str, points: tuple[Point, ...], device: str) -> list[PointResult]:
    """One PointResult per point, as a worker reports it (the parent computes its statistics); a point whose ops the
    runner did not time fails, naming what is missing. `device`: where it ran, unless its `<name> device` line says."""
    timings = {t.key: t.seconds for t in parsed.timings}
    samples = {s.key: list(s.seconds) for s in parsed.samples}
    env = {f"runner_{k.lower().replace(' ', '_')}": v for k, v in parsed.metadata.items()} | {"runner": name}
    device = parsed.metadata.get(f"{name} device", device)
    out = []
    for point in points:
        keys = {op: (name, model, op, point.batch_size) for op in point.ops}
        missing = [" ".join(map(str, k)) for k in keys.values() if k not in timings]
        if missing:
            out.append(PointResult(point.batch_size, failure=f"the runner printed no TIMING line for {missing[0]}"))
            continue
        # with SAMPLES every statistic comes from them; without, the TIMING median is the one sample
        # (n_samples=1, no spread, a CI of zero width: the run says how little it knows)
        ops = {op: OpResult("ok", device=device, measurement=Measurement(samples.get(key, [timings[key]]), 1, math.nan,
                                                                         "runner", sum(samples.get(key, []))))
               for op, key in keys.items()}
        out.append(PointResult(point.batch_size, device, env, ops))
    return out

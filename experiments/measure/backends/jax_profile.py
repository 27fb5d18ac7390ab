"""jax's side of a profile (experiments/measure/profile.py): jax.profiler over a few steps, each XLA op in its
category from the optimized HLO, the trace kept as Chrome JSON and as XLA's xplane. Worker side.

An op is one executed HLO instruction (an XLA:CPU thunk, or a GPU's kernel or a TPU's op as the device's own trace
line times it: on an accelerator the ops are the device's): a fusion counts as the heaviest op it
fuses (`HLO`). Where it sits is read from the source stack that the HLO keeps for every instruction: under optax,
the optimizer; in the loss function, the loss; in a model layer, that layer's category for its elementwise work
(a Conv's bias add is conv, as it is inside torch's conv op). On a CPU a thunk hands heavy work (Eigen
convolutions) to thread pools: that work is found in the xplane's thread-pool regions and counted for the thunk.
jax eager runs one small program per primitive: it is categorized by that program's name (`JAX_PRIMITIVES`).
"""
from __future__ import annotations

import bisect
import contextlib
import re
import shutil
from collections import defaultdict
from pathlib import Path
from typing import Callable, Iterator, NamedTuple

import jax
from jax.profiler import ProfileData

from experiments.common.protocol import Setup
from experiments.measure.backends import Span, Step, Traced
from experiments.measure.categories import HLO, JAX_LAYERS, JAX_PRIMITIVES, JAX_WHOLE_LAYERS, first_match

INSTRUCTION = re.compile(r"^\s*(?:ROOT\s+)?%(?P<name>[^\s=]+) = .*? (?P<opcode>[a-z][a-z0-9\-_]*)\((?P<rest>.*)$")
COMPUTATION = re.compile(r"^(?:ENTRY\s+)?%(?P<name>[^\s(]+) \(.*\{\s*$")
SECTIONS = ("FileNames", "FunctionNames", "FileLocations", "StackFrames")
HEAVY = {"convolution", "dot", "reduce-window", "select-and-scatter", "scatter"}  # two in one op: a library fusion


@contextlib.contextmanager
def capture(setup: Setup) -> Iterator[Callable[[Step], str | None]]:
    """Nothing to set before the build; yields program(step): XLA's optimized HLO (None in eager)."""
    yield lambda step: step.program() if step.program else None


def trace(step: Step, op: str, steps: int, out: Path, device: str, program: str | None
          ) -> tuple[list[Traced], list[str]]:
    """`steps` calls under jax.profiler, each in a `nnbench.step#<i>` annotation; writes trace.json.gz (Chrome
    JSON) and trace.xplane.pb (XLA's own, with the thread-pool links the JSON lacks)."""
    raw = out / "raw"
    shutil.rmtree(raw, ignore_errors=True)
    options = jax.profiler.ProfileOptions()
    options.python_tracer_level = 0  # not every Python call: the step's own cost stays close to the timed one
    with jax.profiler.trace(str(raw), profiler_options=options):
        for i in range(steps):
            with jax.profiler.TraceAnnotation(f"nnbench.step#{i}"):
                step.sync(step.fn())
    for pattern, name in (("*.xplane.pb", "trace.xplane.pb"), ("*.trace.json.gz", "trace.json.gz")):
        (found,) = raw.glob(f"plugins/profile/*/{pattern}")
        shutil.move(found, out / name)
    shutil.rmtree(raw)
    marks, ops = xla_ops(out / "trace.xplane.pb", accelerator=not device.startswith("cpu"))
    notes = []
    if program:
        hlo = Hlo(program)

        def span(o: Op) -> Span:
            return Span(o.hlo_op, hlo.category(o.hlo_op), o.start, o.end, o.part)

        notes += [f"{n} is a library fusion of {', '.join(sorted(k))}: all of it counts as {hlo.category(n)}"
                  for n, k in sorted(hlo.fused_heavy().items())]
    else:
        def span(o: Op) -> Span:
            name = o.module.removeprefix("jit_")
            return Span(name, first_match(JAX_PRIMITIVES, name), o.start, o.end, o.part)

        notes.append("jax eager: each op is categorized by the name of its own small program (a primitive, or an "
                     "optax helper), so the loss's, BatchNorm's and most of the optimizer's arithmetic is elementwise")
    return [Traced(s0, s1, [span(o) for o in ops if s0 <= o.start < s1]) for s0, s1 in marks], notes


class Hlo:
    """The optimized HLO text: its instructions, computations and source stacks; the category of an instruction."""

    def __init__(self, text: str):
        self.ins: dict[str, dict] = {}
        self.comps: dict[str, list[str]] = defaultdict(list)
        self.tables: dict[str, dict[int, str]] = {s: {} for s in SECTIONS}
        self.users: dict[str, list[str]] = defaultdict(list)
        self.memo: dict[str, str] = {}
        self.entry = comp = section = None
        for line in text.splitlines():
            if line in self.tables:
                section = line
            elif section:
                if not line.strip():
                    section = None
                else:
                    key, value = line.split(" ", 1)
                    self.tables[section][int(key)] = value.strip().strip('"')
            elif m := COMPUTATION.match(line):
                comp = m["name"]
                self.entry = comp if line.startswith("ENTRY") else self.entry
            elif (m := INSTRUCTION.match(line)) and comp:
                rest, frame = m["rest"], re.search(r"stack_frame_id=(\d+)", m["rest"])
                self.ins[m["name"]] = {
                    "opcode": m["opcode"], "comp": comp, "frame": int(frame[1]) if frame else 0,
                    "calls": re.findall(r"(?:calls|to_apply|body|condition|branch_computations)=\{?%([^\s,}]+)", rest),
                    "operands": re.findall(r"%([^\s,)]+)", rest.split("),")[0])}
                self.comps[comp].append(m["name"])
                for o in self.ins[m["name"]]["operands"]:
                    self.users[o].append(m["name"])

    def stack(self, frame: int) -> list[tuple[str, str]]:
        """[(file, function)], innermost first. The text writes each frame's parent one above the id it means
        (a root writes its own id): parent = written - 1, 0 = none."""
        out, seen, t = [], set(), self.tables
        while frame and frame in t["StackFrames"] and frame not in seen:
            seen.add(frame)
            f = dict(kv.split("=") for kv in t["StackFrames"][frame].strip("{}").split())
            loc = dict(kv.split("=") for kv in t["FileLocations"][int(f["file_location_id"])].strip("{}").split())
            out.append((t["FileNames"][int(loc["file_name_id"])], t["FunctionNames"][int(loc["function_name_id"])]))
            frame = int(f["parent_frame_id"]) - 1
        return out

    def opcodes(self, name: str, depth: int = 0) -> set[str]:
        """The opcodes an instruction runs: its own and those of the computations it calls."""
        i = self.ins[name]
        out = {i["opcode"]}
        for c in i["calls"] if depth < 4 else ():
            for n in self.comps.get(c, []):
                out |= self.opcodes(n, depth + 1)
        return out - {"parameter", "tuple", "get-tuple-element", "fusion", "call"}

    def context(self, name: str) -> tuple[str | None, str | None]:
        """(optimizer, loss, model, whole or None; the innermost model layer's category, or the category of a layer
        that takes all of its work (`JAX_WHOLE_LAYERS`, any frame), or None), from the source stack of the
        instruction, else of the first instruction it fuses that has one."""
        i = self.ins[name]
        for frame in [i["frame"]] + [self.ins[n]["frame"] for c in i["calls"] for n in self.comps.get(c, [])]:
            stack = self.stack(frame)
            if any("/optax/" in f for f, _ in stack):
                return "optimizer", None
            if any("/flax/" in f or f.endswith("jax_layers.py") for f, _ in stack):
                if whole := next((c for _, fn in stack for p, c in JAX_WHOLE_LAYERS if re.search(p, fn)), None):
                    return "whole", whole
                return "model", next((c for _, fn in stack for p, c in JAX_LAYERS if re.search(p, fn)), None)
            if any(fn.startswith("make_loss") for _, fn in stack):
                return "loss", None
        return None, None

    def kind(self, name: str) -> str:
        ops = self.opcodes(name)
        return next((c for opcodes, c in HLO if ops & opcodes), "other")

    def category(self, name: str, depth: int = 0) -> str:
        if name not in self.ins:
            return "other"
        if name not in self.memo:
            where, layer = self.context(name)
            kind = self.kind(name)
            if where in ("optimizer", "loss"):
                cat = where
            elif where == "whole":
                cat = layer
            elif kind in ("elementwise", "fill") and layer:
                cat = layer
            elif (kind == "fill" or where is None and "reduce-window" in self.opcodes(name)) and depth < 4:
                # an iota or broadcast made for its consumer (max-pool's argmax indices), or a partial reduction
                # XLA split off a reduce (bias gradients, the loss's sum) with no source of its own: the consumer's
                cat = self.consumer(name, depth) or ("copy" if kind == "fill" else kind)
            else:
                cat = "copy" if kind == "fill" else kind
            self.memo[name] = cat
        return self.memo[name]

    def consumer(self, name: str, depth: int) -> str | None:
        """The category of the first user in the same computation, looking through tuples and layout steps."""
        for u in (u for u in self.users[name] if self.ins[u]["comp"] == self.ins[name]["comp"]):
            if self.ins[u]["opcode"] in ("get-tuple-element", "bitcast", "tuple"):
                c = self.consumer(u, depth + 1) if depth < 6 else None
            else:
                c = self.category(u, depth + 1)
                if c == "copy" and not self.ins[u]["frame"] and depth < 6:
                    c = self.consumer(u, depth + 1) or c
            if c:
                return c
        return None

    def fused_heavy(self) -> dict[str, set[str]]:
        """Instructions of the entry computation that run two or more heavy opcodes (a library fusion, such as
        XLA:CPU's YNNPACK fusions): the category of the first holds all of their time."""
        return {n: heavy for n in self.comps[self.entry] if len(heavy := self.opcodes(n) & HEAVY) > 1}


class Op(NamedTuple):
    """One executed HLO instruction, or a piece of its work on a pool thread (`part`), in seconds."""

    start: float
    end: float
    hlo_op: str
    module: str
    part: bool


def xla_ops(xplane: Path, accelerator: bool) -> tuple[list[tuple[float, float]], list[Op]]:
    """The step marks, and every op: an accelerator's (`device_ops`), or XLA:CPU thunks with the thread-pool work
    they handed off.

    A CPU thunk's event covers its own thread only; work it sends to a pool shows as a ThreadpoolListener
    Start/StopRegion pair whose consumer id (_c) is the producer id (_p) of a ThreadpoolListener::Record. A region
    belongs to the thunk that recorded it, directly or through the region the Record sits in; a region that runs
    thunks itself is the executor's (those thunks count themselves) and belongs to no op."""
    data = ProfileData.from_file(str(xplane))
    host = data.find_plane_with_name("/host:CPU")
    marks, thunks, records, regions = [], [], {}, []
    for line in host.lines:
        start = None
        for e in sorted(line.events, key=lambda e: e.start_ns):
            if e.name.startswith("nnbench.step#"):
                marks.append((e.start_ns / 1e9, (e.start_ns + e.duration_ns) / 1e9))
            elif accelerator:
                continue
            elif e.name.startswith("ThreadpoolListener::"):
                stats = dict(e.stats)
                if e.name.endswith("Record"):
                    records[stats.get("_p")] = (line.name, e.start_ns)
                elif e.name.endswith("StartRegion"):
                    start = (e.start_ns, stats.get("_c"))
                elif e.name.endswith("StopRegion") and start:
                    regions.append((line.name, start[0], e.start_ns, start[1]))
                    start = None
            elif e.duration_ns and not e.name.startswith("end: "):
                stats = dict(e.stats)
                if "hlo_op" in stats:
                    thunks.append((line.name, e.start_ns, e.start_ns + e.duration_ns, stats["hlo_op"],
                                   stats.get("hlo_module", "")))
    thunks += device_ops(data) if accelerator else []
    ops = [Op(a / 1e9, b / 1e9, op, module, False) for _, a, b, op, module in thunks]
    owner = region_owner(thunks, records, regions)
    ops += [Op(r[1] / 1e9, r[2] / 1e9, *t, True) for r in regions if (t := owner(r))]
    return sorted(marks), ops


# Per accelerator, its planes' name and the trace lines that time its ops: a GPU's streams (not XProf's summaries),
# a TPU's "XLA Ops" line (its steps and modules are lines of their own); else every line of the plane.
DEVICE_LINES = {"/device:GPU": ("Stream",), "/device:TPU": ("XLA Ops",)}


def device_ops(data) -> list[tuple]:
    """The accelerator's ops as thunks (line, start ns, end ns, hlo op, hlo module): a GPU kernel names its HLO op in
    its `hlo_op` stat, a TPU op by its event's own name."""
    out = []
    for plane in data.planes:
        prefix = next((p for p in DEVICE_LINES if plane.name.startswith(p)), None)
        if prefix is None:
            continue
        lines = [line for line in plane.lines if line.name.startswith(DEVICE_LINES[prefix])] or plane.lines
        for line in lines:
            for e in line.events:
                stats = dict(e.stats)
                if "hlo_op" in stats or prefix == "/device:TPU":
                    out.append((line.name, e.start_ns, e.start_ns + e.duration_ns,
                                str(stats.get("hlo_op", e.name)).lstrip("%"), stats.get("hlo_module", "")))
    return out


def region_owner(thunks: list[tuple], records: dict, regions: list[tuple]) -> Callable[[tuple], tuple | None]:
    """region -> (hlo op, hlo module) of the thunk whose work it is, or None."""

    def index(items):  # per thread, sorted by start: the item holding time t on a thread
        by = defaultdict(list)
        for it in sorted(items, key=lambda it: it[1]):
            by[it[0]].append(it)
        return by, {k: [it[1] for it in v] for k, v in by.items()}

    def at(table, thread, t):
        by, starts = table
        i = bisect.bisect_right(starts.get(thread, []), t) - 1
        return by[thread][i] if i >= 0 and by[thread][i][1] <= t <= by[thread][i][2] else None

    thunk_at, region_at = index(thunks), index(regions)
    starts = thunk_at[1]
    memo: dict = {}

    def owner(r, depth: int = 0):
        key = r[3]
        if key in memo:
            return memo[key]
        memo[key] = None
        v = starts.get(r[0], [])
        i = bisect.bisect_left(v, r[1])
        if (i < len(v) and v[i] <= r[2]) or depth > 50:  # a region that runs thunks: the executor's
            return None
        found = None
        if rec := records.get(key):
            if th := at(thunk_at, *rec):
                found = (th[3], th[4])
            elif (parent := at(region_at, *rec)) is not None and parent[3] != key:
                found = owner(parent, depth + 1)
        memo[key] = found
        return found

    return owner

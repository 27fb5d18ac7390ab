"""Profile one prepared op: a few steps under the framework's profiler, every op put in a category, one step's wall
time split into the categories and the overhead, the top ops, and the raw trace and the compiled program as files.

Worker side. It runs only for a profile request (`Request.profile_dir`), in a worker of its own that the harness
starts after the point's timed ones: the profiler never runs beside a timed sample. The framework's part (its
profiler, how its ops are told apart) is `backends/<name>_profile.py`, imported only for that framework; both offer
`capture(setup)` and `trace(step, op, steps, out, device, program)`.
"""
from __future__ import annotations

import math
import statistics
import time
from collections import Counter, defaultdict
from importlib import import_module
from pathlib import Path

from experiments.common.protocol import CATEGORIES, PARTS, OpProfile, OpResult, ProfiledOp, Request
from experiments.measure.backends import Span, Traced, Unsupported
from experiments.measure.categories import OTHER_ALLOWED, OTHER_BOUND
from experiments.measure.timing import warm_up

STEPS = (5, 20)  # profiled steps, at least and at most...
PROFILE_S = 0.5  # ...enough of them to fill about this long
TOP = 15  # ops in the top table


def split_time(spans: list[Span]) -> dict[tuple[str, str], float]:
    """{(name, category): seconds}: where k ops overlap (XLA runs ops on several threads), each gets 1/k of that
    stretch, so the values sum to the length of the union of the intervals: the time inside ops."""
    edges = sorted((t, kind, i) for i, s in enumerate(spans) if s.end > s.start
                   for t, kind in ((s.start, 1), (s.end, -1)))
    out: dict[tuple[str, str], float] = defaultdict(float)
    active: set[int] = set()
    prev = 0.0
    for t, kind, i in edges:  # at equal times an end (-1) sorts before a start
        if active and t > prev:
            share = (t - prev) / len(active)
            for j in active:
                out[spans[j].name, spans[j].category] += share
        prev = t
        if kind == 1:
            active.add(i)
        else:
            active.discard(i)
    return out


def clip(step: Traced) -> list[Span]:
    return [Span(s.name, s.category, max(s.start, step.start), min(s.end, step.end), s.part) for s in step.spans
            if s.end > step.start and s.start < step.end]


def parts_of(wall: float, by_op: dict[tuple[str, str], float]) -> dict[str, float]:
    """Seconds per category, and the overhead: the wall time outside every op."""
    parts = dict.fromkeys(CATEGORIES, 0.0)
    for (_, category), t in by_op.items():
        parts[category] += t
    return parts | {"overhead": max(0.0, wall - sum(by_op.values()))}


def summarize(steps: list[Traced], elapsed_s: float, notes: list[str]) -> OpProfile:
    """The most typical step split into categories and overhead (they sum to its wall time): the step whose parts
    are closest to each part's median over the steps, so one op caught by a preemption does not pick it; the
    top ops by their median time per step."""
    per_step = []
    for step in steps:
        spans = clip(step)
        ops = split_time(spans)
        per_step.append((parts_of(step.end - step.start, ops), ops, Counter(s.name for s in spans if not s.part)))
    medians = {p: statistics.median(parts[p] for parts, _, _ in per_step) for p in PARTS}
    parts = min((parts for parts, _, _ in per_step), key=lambda q: sum(abs(q[p] - medians[p]) for p in PARTS))
    keys = {k for _, ops, _ in per_step for k in ops}
    top = sorted((ProfiledOp(name, cat, statistics.median(c[name] for _, _, c in per_step),
                             statistics.median(ops.get((name, cat), 0.0) for _, ops, _ in per_step))
                  for name, cat in keys), key=lambda o: -o.self_s)[:TOP]
    wall = sum(parts.values())
    busy = wall - parts["overhead"]
    if busy > 0 and parts["other"] > OTHER_BOUND * busy:
        notes.append(f"other is {parts['other'] / busy:.0%} of the op time (bound {OTHER_BOUND:.0%}): an op the "
                     "category tables (experiments/measure/categories.py) do not know")
    return OpProfile(wall, parts, [sum(q.values()) for q, _, _ in per_step], top, elapsed_s, notes)


def on_device(p: OpProfile) -> None:
    """An accelerator's own time per step, beside the timed medians (synced or pipelined): the time its ops took in
    the most typical step, whose ops are the device's; or a note saying why it is unknown."""
    busy = p.wall_s - p.parts_s["overhead"]
    if busy > 0:
        p.device_s = busy
    else:
        p.notes.append("the trace holds no op of the device: its own time per step is unknown")


def top_markdown(p: OpProfile, title: str) -> str:
    """The top table: op, category, calls, self time and share of the step."""
    device = f"; the device's own time {p.device_s * 1e3:.3f} ms" if p.device_s is not None else ""
    rows = [f"# {title}", "", f"Profiled step: {p.wall_s * 1e3:.3f} ms (the most typical of {len(p.step_walls_s)} "
            f"steps); overhead (no op running) {p.parts_s['overhead'] * 1e3:.3f} ms{device}. Ops: medians over the "
            "steps.", "",
            "| op | category | calls | self ms | share of the step |", "|---|---|---|---|---|"]
    rows += [f"| `{o.name[:90]}` | {o.category} | {o.calls:g} | {o.self_s * 1e3:.3f} | {o.self_s / p.wall_s:.1%} |"
             for o in p.top]
    return "\n".join(rows + [""] + [f"- {n}" for n in p.notes]) + "\n"


def profile_op(backend, spec, req: Request, op: str, batch: int, out: Path) -> OpResult:
    """Build the op as a timed worker would, call it once (the compile) and warm it up, then profile a few steps
    with the request's framework; the files go to `out` (trace, program, top.md, profile.json)."""
    begin, framework = time.perf_counter(), req.framework
    try:
        tracer = import_module(f"experiments.measure.backends.{framework}_profile")
    except ModuleNotFoundError as e:  # a backend without a profiler: profile=true skips its ops, saying so
        if e.name != f"experiments.measure.backends.{framework}_profile":  # its profiler's own import failed
            raise
        return OpResult("skipped", reason=f"the {framework} backend has no profiler (backends/{framework}_profile.py)")
    with tracer.capture(req.setup) as program:  # what the profiler needs compiled in, set before the build
        try:
            step = backend.prepare(spec, op, batch, req.seed)
        except Unsupported as e:
            return OpResult("skipped", reason=str(e))
        first = step.fn()
        step.sync(first)
        device = step.device_of(first)
        del first
    per_call, _ = warm_up(step.fn, step.sync, req.budget)
    steps = min(STEPS[1], max(STEPS[0], math.ceil(PROFILE_S / per_call)))
    out.mkdir(parents=True, exist_ok=True)
    text = program(step)
    if text:
        (out / "program.txt").write_text(text)
    traced, notes = tracer.trace(step, op, steps, out, device, text)
    allowed = OTHER_ALLOWED.get((framework, spec.name))
    p = summarize(traced, time.perf_counter() - begin, notes + ([allowed] if allowed else []))
    if not device.startswith("cpu"):
        on_device(p)
    how = "compiled" if req.setup.compile else "eager"
    (out / "top.md").write_text(top_markdown(p, f"{spec.name} {op} bs{batch} · {framework} {how}"))
    (out / "profile.json").write_text(p.to_json())
    return OpResult("ok", device=device, profile=p)

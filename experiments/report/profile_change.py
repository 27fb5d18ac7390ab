"""Where a judged cell's time went: the profiles of its two sides (profile=true's `OpProfile`, A's and B's) part by
part (the categories and the overhead) and op by op (their top tables), B's time against A's, and the change in
words: `the change: matmul +0.41 ms, +18%; everything else within ±2%`. No MLflow. Parent side.

Each side's profile is one worker's, after that side's last burst: the two are taken at two moments, and a machine
that drifts, or a neighbour that shares the core for a while, can make one side's every op twice as slow as the
other's for that moment alone. So where each side's timed median is known (the paired bursts, interleaved, are drift's
answer), a side's parts and ops are its profile's shares of the profiled step times its timed step: the profile says
where the time went, the paired measurement how much."""
from __future__ import annotations

from dataclasses import dataclass

from experiments.common.protocol import PARTS, Json, OpProfile

# A part whose time changed by at most this share of A's profiled step is "everything else": two profiles of the
# same step, in two workers, differ by a few percent per part.
WITHIN = 0.02
OPS_SAID = 3  # the top ops that changed most, in words


@dataclass(frozen=True)
class Part(Json):
    """One part of the step (a category, or the overhead) or one op, in A's profile and in B's, per step."""

    name: str  # one of PARTS, or an op's name
    category: str  # an op's category; a part's is its name
    a_s: float | None  # None: not in that side's top table (an op)
    b_s: float | None
    a_calls: float | None = None  # an op's calls per step
    b_calls: float | None = None

    @property
    def delta_s(self) -> float:
        return (self.b_s or 0.0) - (self.a_s or 0.0)


@dataclass(frozen=True)
class ProfileChange(Json):
    """A cell's two profiles side by side: every part and every top op of either, the largest change first."""

    a_wall_s: float  # A's step: its timed median where known, else its profiled step
    b_wall_s: float
    parts: list[Part]
    ops: list[Part]
    cost_s: float  # profiling the op on both sides took: builds, first calls, warm-ups, profiled steps, files
    a_profiled_s: float | None = None  # A's profiled step, where the parts are scaled to its timed median
    b_profiled_s: float | None = None

    @classmethod
    def of(cls, a: OpProfile, b: OpProfile, timed: tuple[float, float] | None = None) -> "ProfileChange":
        """A's and B's profiles side by side; given `timed` (each side's timed median step), each side's times are
        scaled by its timed step over its profiled one."""
        ka, kb = (t / p.wall_s for t, p in zip(timed, (a, b))) if timed else (1.0, 1.0)
        parts = [Part(p, p, a.parts_s.get(p, 0.0) * ka, b.parts_s.get(p, 0.0) * kb) for p in PARTS]
        top_a, top_b = ({(o.name, o.category): o for o in p.top} for p in (a, b))
        ops = []
        for name, category in dict.fromkeys([*top_a, *top_b]):
            x, y = top_a.get((name, category)), top_b.get((name, category))
            ops.append(Part(name, category, x and x.self_s * ka, y and y.self_s * kb, x and x.calls, y and y.calls))
        profiled = (a.wall_s, b.wall_s)
        return cls(*(timed or profiled), sorted(parts, key=largest), sorted(ops, key=largest),
                   a.elapsed_s + b.elapsed_s, *(profiled if timed else (None, None)))

    def changed(self, within: float = WITHIN) -> list[Part]:
        """The parts whose time changed by more than `within` of A's step."""
        return [p for p in self.parts if abs(p.delta_s) > within * self.a_wall_s]

    def said(self, within: float = WITHIN) -> str:
        """The parts that changed by more than `within` (ms, and the share of A's step), the rest in one phrase,
        then the top ops that changed most, as much: `the change: matmul +0.41 ms, +18%; everything else within ±2% (step 2.28 → 2.71 ms); ops:
        aten::mm +0.40 ms (10 → 20 calls)`."""
        moved = self.changed(within)
        words = [f"{p.name} {p.delta_s * 1e3:+.3g} ms, {p.delta_s / self.a_wall_s:+.0%}" for p in moved]
        rest = f"everything else within ±{within:.0%}" if moved else f"no part beyond ±{within:.0%}"
        ops = [f"{p.name[:60]} {p.delta_s * 1e3:+.3g} ms{calls(p)}" for p in self.ops[:OPS_SAID]
               if abs(p.delta_s) > within * self.a_wall_s]
        return (f"the change: {'; '.join([*words, rest])} (step {self.a_wall_s * 1e3:.3g} → {self.b_wall_s * 1e3:.3g} "
                f"ms){'; ops: ' + ', '.join(ops) if ops else ''}")


def largest(p: Part) -> float:
    return -abs(p.delta_s)


def calls(p: Part) -> str:
    """` (10 → 20 calls)` where an op's calls per step differ; `(not in A's top)` where one side lacks it."""
    if p.a_s is None or p.b_s is None:
        return f" (not in {'A' if p.a_s is None else 'B'}'s top)"
    return f" ({p.a_calls:g} → {p.b_calls:g} calls)" if p.a_calls != p.b_calls else ""

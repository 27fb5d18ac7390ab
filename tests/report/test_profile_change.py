"""Where a judged cell's time went (`report.profile_change`): two profiles whose answer is known, side by side, and in
words."""
import pytest

from experiments.common.protocol import PARTS, OpProfile, ProfiledOp
from experiments.report.profile_change import WITHIN, ProfileChange


def profile(matmul_ms: float, overhead_ms: float, mm_calls: int, copy_ms: float = 0.0) -> OpProfile:
    """A step of `mm_calls` matmuls, a relu, the overhead, and (`copy_ms`) copies outside the top table."""
    parts = dict.fromkeys(PARTS, 0.0) | {"matmul": matmul_ms / 1e3, "overhead": overhead_ms / 1e3,
                                         "elementwise": 0.5e-3, "copy": copy_ms / 1e3}
    top = [ProfiledOp("aten::mm", "matmul", mm_calls, matmul_ms / 1e3), ProfiledOp("aten::relu", "elementwise", 10,
                                                                                  0.5e-3)]
    return OpProfile(sum(parts.values()), parts, [sum(parts.values())] * 5, top, 1.5)


def test_twice_the_matmuls_name_matmul_and_nothing_else():
    a, b = profile(2.0, 1.0, 10), profile(4.0, 1.01, 20)
    c = ProfileChange.of(a, b)
    assert [p.name for p in c.changed()] == ["matmul"]
    assert c.parts[0].name == "matmul" and c.parts[0].delta_s == b.parts_s["matmul"] - a.parts_s["matmul"]
    assert (c.a_wall_s, c.b_wall_s, c.cost_s) == (a.wall_s, b.wall_s, a.elapsed_s + b.elapsed_s)
    assert c.said() == (f"the change: matmul +2 ms, +{2 / 3.5:.0%}; everything else within ±{WITHIN:.0%} (step 3.5 → "
                        "5.51 ms); ops: aten::mm +2 ms (10 → 20 calls)")
    assert ProfileChange.from_json(c.to_json()) == c


def test_every_part_beyond_the_bound_is_named_largest_first():
    c = ProfileChange.of(profile(2.0, 1.0, 10), profile(2.0, 1.5, 10, copy_ms=0.3))
    assert [p.name for p in c.changed()] == ["overhead", "copy"]
    assert c.said().startswith("the change: overhead +0.5 ms, +14%; copy +0.3 ms, +9%; everything else within ±2%")
    assert "aten::mm" not in c.said()  # its time and calls did not change


def test_alike_profiles_say_so_and_an_op_one_side_lacks_is_marked():
    a = profile(2.0, 1.0, 10)
    assert ProfileChange.of(a, a).said() == "the change: no part beyond ±2% (step 3.5 → 3.5 ms)"
    b = OpProfile(a.wall_s + 1e-3, a.parts_s | {"copy": 1e-3}, a.step_walls_s, [*a.top, ProfiledOp("aten::copy_",
                                                                                                  "copy", 4, 1e-3)],
                  1.0)
    assert "ops: aten::copy_ +1 ms (not in A's top)" in ProfileChange.of(a, b).said()


def test_a_side_profiled_while_its_core_was_shared_is_read_at_its_timed_step():
    """A's profile ran at half speed (every op twice as slow, its timed median unchanged): unscaled, matmul reads
    unchanged and the rest faster; scaled to each side's timed step, matmul's time doubled and nothing else moved."""
    a, b = profile(2.0, 1.0, 10), profile(4.0, 1.0, 20)
    slowed = OpProfile(2 * a.wall_s, {p: 2 * t for p, t in a.parts_s.items()}, a.step_walls_s,
                       [ProfiledOp(o.name, o.category, o.calls, 2 * o.self_s) for o in a.top], a.elapsed_s)
    assert [p.name for p in ProfileChange.of(slowed, b).changed()] == ["overhead", "elementwise"]  # unscaled
    c = ProfileChange.of(slowed, b, (a.wall_s, b.wall_s))
    assert [p.name for p in c.changed()] == ["matmul"] and c.parts[0].delta_s == pytest.approx(2e-3)
    assert (c.a_wall_s, c.b_wall_s, c.a_profiled_s) == (a.wall_s, b.wall_s, slowed.wall_s)
    assert c.ops[0].name == "aten::mm" and c.ops[0].a_s == pytest.approx(2e-3) and c.said().startswith(
        "the change: matmul +2 ms, +57%; everything else within ±2% (step 3.5 → 5.5 ms)")
    assert ProfileChange.from_json(c.to_json()) == c

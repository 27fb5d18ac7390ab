"""Which sides share a worker and which workers alternate (harness/designs.py), and the session that follows the plan:
on a device one process at a time may open (a TPU chip, `Setup.exclusive`) the sides of one environment share a
worker and the workers of different environments alternate, whole processes one after another per trial; the
others burst as before; `bench.paired_design` forces any design on the CPU. With the stand-in worker
(tests/helpers/fake_worker.py) holding a lock file as libtpu holds its chip: a second worker alive at once fails
where workers burst together, never where they alternate; a worker serving two sides answers each side's commands,
never stopped."""
import dataclasses
import sys
from pathlib import Path

import numpy as np
import pytest

from experiments.common.protocol import Burst, Point, Prepared, Ready, Request, Setup
from experiments.harness import designs, manager, pairs
from tests.helpers import budget, fake_interpreter

CELLS = [pairs.Cell(2, "inference"), pairs.Cell(4, "inference")]


def side(label: str, framework: str = "jax", device: str = "tpu", python: str = sys.executable, cache: str = "",
         **setup) -> pairs.Side:
    """A side as a sweep makes it (its own compile cache dir), not started."""
    s = Setup(setup.pop("precision", "fp32"), device, memory_format="nhwc", **setup)
    req = Request(framework, s, {"name": "mlp_relu"}, 0, budget("quick"), (Point(2, ("inference",)),))
    environ = manager.environ("glibc", Path("/tmp/cache") / (cache or label))
    return pairs.Side(label, req, python, environ, "spawn", 60)


def test_a_device_one_process_may_open_is_the_setups_device():
    assert Setup("fp32", "tpu").exclusive and Setup("bf16", "tpu:0").exclusive
    assert not any(Setup("fp32", d).exclusive for d in ("cpu", "gpu", "auto"))


def test_auto_shares_one_worker_per_environment_on_such_a_device_beside_bursting_sides():
    """jax jit, eager and bf16 on a TPU, one interpreter (each its own compile cache): one worker; torch on the CPU
    bursts beside it. jax fp64 (a process-wide mode) and framework.threads=1 get workers of their own, and the
    workers holding the chip then alternate, the CPU's sides bursting in a stage of their own."""
    jit, eager, bf16 = side("jit", compile=True), side("eager"), side("bf16", compile=True, precision="bf16")
    torch = side("torch", "torch", "cpu")
    p = designs.plan([jit, eager, bf16, torch], "auto")
    assert p == designs.Plan(((0, 1, 2), (3,)), ((0, 1),))
    assert (p.design(1, 0), p.design(2, 0), p.design(3, 0), p.name) == ("in-process", "in-process", "bursts",
                                                                        "bursts+in-process")
    p = designs.plan([jit, side("fp64", precision="fp64"), side("one", threads=1), torch, eager], "auto")
    assert p == designs.Plan(((0, 4), (1,), (2,), (3,)), ((0,), (1,), (2,), (3,)))
    assert (p.design(4, 0), p.design(1, 0), p.design(3, 0), p.name) == ("in-process", "alternating", "alternating",
                                                                        "in-process+alternating")
    assert designs.plan([torch, side("torch2", "torch", "cpu")], "auto") == designs.Plan(((0,), (1,)), ((0, 1),))


def test_two_environments_on_such_a_device_alternate_and_the_design_is_forced_by_name():
    """Two interpreters on a TPU: a worker each, alternating. On the CPU, bench.paired_design forces each design:
    bursts (as auto there), in-process (one environment: one worker), alternating (a worker per side, in turn)."""
    a, b = side("a", python="/envs/a/bin/python"), side("b", python="/envs/b/bin/python")
    assert designs.plan([a, b], "auto") == designs.Plan(((0,), (1,)), ((0,), (1,)))
    assert designs.plan([a, b], "auto").design(1, 0) == "alternating"
    cpu = [side("jit", device="cpu", compile=True), side("eager", device="cpu"), side("bf16", device="cpu",
                                                                                       precision="bf16")]
    assert designs.plan(cpu, "auto") == designs.plan(cpu, "bursts") == designs.Plan(((0,), (1,), (2,)), ((0, 1, 2),))
    assert designs.plan(cpu, "in-process") == designs.Plan(((0, 1, 2),), ((0,),))
    assert designs.plan(cpu, "alternating") == designs.Plan(((0,), (1,), (2,)), ((0,), (1,), (2,)))
    assert designs.plan(cpu[:1], "in-process").name == "bursts"  # a side alone: nothing took turns


def test_the_stages_order_is_drawn_per_trial_and_reversed_in_the_next():
    """Drawn at random in even trials, reversed in the odd one after: over two trials each stage's places balance
    (with two stages, each comes first once), and the draws differ from pair to pair."""
    p = designs.Plan(((0,), (1,), (2,)), ((0,), (1,), (2,)))
    orders = [p.ordered(i, seed=0) for i in range(40)]
    assert all(orders[i + 1] == orders[i][::-1] for i in range(0, 40, 2))
    assert len({tuple(o) for o in orders}) > 2 and orders == [p.ordered(i, seed=0) for i in range(40)]
    two = designs.Plan(((0,), (1,)), ((0,), (1,)))
    assert all({two.ordered(i, 1)[0], two.ordered(i + 1, 1)[0]} == {(0,), (1,)} for i in range(0, 20, 2))
    assert designs.Plan(((0, 1),), ((0,),)).ordered(5, seed=3) == [(0,)]


def test_a_trials_stages_merge_into_one_cell_each_side_from_its_stage():
    ok = Prepared("ok")
    b_first = pairs.Trial(0, [pairs.Turn(), pairs.Turn(ready=Ready(), prepared=ok, bursts=[Burst([2.0])])],
                          "B", wall_s=1.0, meter={"wall_s": 1.0, "busy_cpu_s": 0.5})
    a_then = pairs.Trial(0, [pairs.Turn(ready=Ready(), prepared=ok, bursts=[Burst([1.0])]), pairs.Turn()],
                         "A", wall_s=2.0, meter={"wall_s": 2.0, "busy_cpu_s": 1.0})
    t = designs.merged([b_first, a_then], 2, ["B", "A"])
    assert t.order == "BA" and t.stages == ["B", "A"] and t.wall_s == 3.0 and t.meter == {"wall_s": 3.0,
                                                                                          "busy_cpu_s": 1.5}
    assert t.failure is None and t.log_ratio(1, 0) == pytest.approx(np.log(2.0))
    failed = dataclasses.replace(a_then, failure="worker A exited with code 1", failed_side=0)
    t = designs.merged([b_first, failed], 2, ["B", "A"])
    assert (t.failure, t.failed_side, t.log_ratio(1, 0)) == ("worker A exited with code 1", 0, None)


def stand_ins(tmp_path, names: str, **env) -> list[pairs.Side]:
    """Sides measured by the stand-in worker, one interpreter each (an environment each), FAKE_FAULT=none."""
    out = []
    for name in names:
        (tmp_path / name).mkdir(exist_ok=True)
        s = side(name, "torch", "cpu", python=fake_interpreter(tmp_path / name))
        out.append(dataclasses.replace(s, environ=s.environ | {"FAKE_FAULT": "none"} | env))
    return out


def overlapping(trials: list[pairs.Trial]) -> list[tuple]:
    """The pairs of workers of a trial that were alive at once."""
    lives = [w for t in trials for w in t.workers]
    return [(a, b) for a in lives for b in lives if a is not b and a.pid != b.pid and a.started < b.started < a.ended]


def test_workers_that_alternate_never_live_at_once_where_bursting_ones_would(tmp_path):
    """Two stand-in environments whose workers hold one lock file, as libtpu holds a chip. Bursting together, the
    second worker stops at the lock (the trial's cells fail naming it; it then sits them out, the first side measuring
    alone). Alternating, each trial's workers live one after another, its stages in an order drawn per trial, both
    measured every cell, twice as slow on B's side as FAKE_SLOWER says: the trial files say how and when."""
    lock = str(tmp_path / "libtpu_lockfile")
    a, b = stand_ins(tmp_path, "ab", FAKE_LOCKFILE=lock)
    b = dataclasses.replace(b, environ=b.environ | {"FAKE_SLOWER": "2"})
    design = pairs.Design(burst_s=0.005, rounds=3, trials=2, max_trials=2, paired_design="bursts")
    first, _ = pairs.Session([a, b], CELLS, design, tmp_path / "bursts").run()
    failed, alone = first.trials
    assert failed.failure == ("worker B exited with code 1: Internal error when accessing libtpu multi-process "
                              "lockfile (before it connected)") and failed.failed_side == 1
    assert "libtpu multi-process lockfile" in failed.stderr_tail
    assert alone.failure is None and alone.turns[0].ok and not alone.turns[1].bursts and alone.paired_design == "bursts"

    design = dataclasses.replace(design, trials=4, max_trials=4, paired_design="alternating")
    compared = pairs.Session([a, b], CELLS, design, tmp_path / "alternating").run()
    for c in compared:
        assert [t.failure for t in c.trials] == [None] * 4 and not overlapping(c.trials)
        stages = [t.stages for t in c.trials]
        assert stages[1] == stages[0][::-1] and stages[3] == stages[2][::-1] and sorted(stages[0]) == ["A", "B"]
        for t in c.trials:
            assert t.paired_design == "alternating" and t.order == "".join(s * 3 for s in t.stages)
            assert [(w.sides, w.stage) for w in t.workers] == [(s, n) for n, s in enumerate(t.stages)]
            assert all(w.ended is not None for w in t.workers)
            assert t.log_ratio(1, 0) == pytest.approx(np.log(2), abs=0.01)
        saved = pairs.Trial.from_json((tmp_path / "alternating" / c.cell.name / "trial-3.json").read_text())
        assert saved == c.trials[3]


def test_sides_of_one_environment_share_a_worker_that_is_never_stopped(tmp_path, monkeypatch):
    """in-process on the CPU: two sides of one stand-in environment, one worker per trial answering a Ready for
    each and each side's commands, in the rounds' order; no stop, as no other worker lives."""
    stops = []
    monkeypatch.setattr(pairs.PairedWorker, "stop", lambda self: stops.append(self.name))
    a, = stand_ins(tmp_path, "a")
    b = dataclasses.replace(a, label="b", request=dataclasses.replace(
        a.request, setup=dataclasses.replace(a.request.setup, compile=True)))
    design = pairs.Design(burst_s=0.005, rounds=4, trials=2, max_trials=2, paired_design="in-process")
    for c in pairs.Session([a, b], CELLS, design, tmp_path / "trials").run():
        assert [t.order for t in c.trials] == ["ABBAABBA", "BAABBAAB"] and not stops
        for t in c.trials:
            assert t.paired_design == "in-process" and [w.sides for w in t.workers] == ["AB"] and not t.stages
            assert all(turn.ok and len(turn.bursts) == 4 and turn.ready for turn in t.turns)
            assert t.log_ratio(1, 0) == pytest.approx(0.0, abs=1e-9)  # one process's speed, both sides
    assert {p.name for p in (tmp_path / "trials" / "trial-0").glob("*.log")} == {"AB.log"}


class Stop(Exception):
    """A signal, as the caller's checkpoint raises it."""


def test_a_signal_between_alternating_workers_keeps_what_the_first_measured(tmp_path):
    """The checkpoint raises once the trial's first worker went through both cells: each cell keeps that worker's
    turn (saved, its samples a point's), with no ratio, the second worker never started."""
    calls = []

    def checkpoint():
        calls.append(1)
        if len(calls) == 2:
            raise Stop

    design = pairs.Design(burst_s=0.005, rounds=3, trials=1, max_trials=1, paired_design="alternating")
    session = pairs.Session(stand_ins(tmp_path, "ab"), CELLS, design, tmp_path / "trials", checkpoint=checkpoint)
    with pytest.raises(Stop):
        session.run()
    for c in session.compared:
        (t,) = c.trials
        first = "AB".index(t.stages[0])
        assert [w.sides for w in t.workers] == [t.stages[0]] and t.turns[first].ok and not t.turns[1 - first].ready
        assert t.log_ratio(1, 0) is None and (tmp_path / "trials" / c.cell.name / "trial-0.json").exists()

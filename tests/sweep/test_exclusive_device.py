"""A device one process at a time may open (a TPU chip), its designs forced on the CPU by bench.paired_design, end to
end in sweeps: jax jit, jit again (an A/A) and eager take turns inside one real worker per trial; two environments'
stand-in workers (tests/helpers/fake_worker.py), holding one lock file as libtpu holds its chip, alternate whole
processes per trial, never alive at once, and the slower one is found. The trial files, the points' tags and the
parent's description say which design measured them."""
from pathlib import Path

import pytest

from experiments.harness.pairs import Trial
from experiments.stats.verdicts import Verdict
from tests.helpers import BRIEF, fake_interpreter, run, runs, with_store

pytestmark = pytest.mark.slow

POINT = ["model=mlp_relu", "batch_size=2", "ops=[inference]", *BRIEF, "bench.rounds=5"]


def trials(cwd: Path) -> list[Trial]:
    """The sweep's trials of its one cell, in order."""
    (sweep,) = cwd.glob("multirun/*/*")
    paths = sorted(sweep.glob("0/trials/bs2-inference/trial-*.json"), key=lambda p: int(p.stem.split("-")[1]))
    return [Trial.from_json(p.read_text()) for p in paths]


def note(uri: str) -> str:
    (parent,) = runs(uri, parents=True).to_dict("records")
    return parent["tags.mlflow.note.content"]


def test_jax_jit_its_a_a_and_eager_take_turns_inside_one_worker(tmp_path):
    """framework.compile=true,true,false with in-process: one worker per trial serves all three, each side its own
    op (compiled once where jitted) and bursts; jit against itself reads no change, eager slower."""
    cwd = with_store(tmp_path)
    # more trials, where trials read far off while others' programs ran are set aside (the suite runs beside it)
    r = run(["-m", "framework=jax", "framework.compile=true,true,false", *POINT, "bench.paired_design=in-process",
             "bench.processes=3", "bench.max_processes=6", "report.baseline=jax-jit fp32"], cwd)
    assert r.returncode == 0, r.stderr[-3000:]
    measured = trials(cwd)
    assert len(measured) >= 3
    for t in measured:
        assert t.failure is None and t.paired_design == "in-process" and not t.stages
        assert [(w.sides, w.stage) for w in t.workers] == [("ABC", 0)] and len(t.order) == 15
        jit, twin, eager = t.turns
        assert jit.prepared.compiles == twin.prepared.compiles == 1 and eager.prepared.compiles is None
        assert all(turn.ok and len(turn.bursts) == 5 for turn in t.turns)
    uri = f"sqlite:///{cwd}/mlruns/mlflow.db"
    df = runs(uri).set_index("tags.variant")
    assert set(df["tags.paired_design"]) == {"in-process"}
    assert df.loc["jax-eager fp32", "tags.inference_verdict"] == str(Verdict.SLOWER)
    assert df.loc["jax-jit fp32 (2)", "tags.inference_verdict"] not in (str(Verdict.SLOWER), str(Verdict.FASTER))
    text = note(uri)
    assert "took turns in short bursts inside one warm worker" in text
    assert "- jax-eager fp32 (in-process): " in text and "- jax-jit fp32 (in-process): nothing else" in text


def test_two_environments_alternate_whole_workers_never_alive_at_once(tmp_path):
    """runtime.python=A,B (B's workers twice as slow) with in-process: a worker per environment, one after another in
    each trial, the first drawn and reversed in the next trial; none stopped at the lock file; B slower, about 2×."""
    lock = tmp_path / "libtpu_lockfile"
    pythons = []
    for name, slower in (("a", "1"), ("b", "2")):
        (tmp_path / name).mkdir()
        pythons.append(fake_interpreter(tmp_path / name, FAKE_LOCKFILE=str(lock), FAKE_SLOWER=slower))
    cwd = with_store(tmp_path / "cwd")
    r = run(["-m", "framework=torch", f"runtime.python={','.join(pythons)}", *POINT, "parity=false",
             "bench.paired_design=in-process", "bench.processes=4", "bench.max_processes=8"], cwd, FAKE_FAULT="none")
    assert r.returncode == 0, r.stderr[-3000:]
    measured = trials(cwd)
    assert len(measured) >= 4
    lives = [w for t in measured for w in t.workers]
    assert len(lives) == 2 * len(measured) and all(w.ended is not None for w in lives)
    assert not [(a, b) for a in lives for b in lives if a is not b and a.started < b.started < a.ended]
    for t in measured:
        assert t.failure is None and t.paired_design == "alternating" and sorted(t.stages) == ["A", "B"]
        assert [w.sides for w in t.workers] == t.stages and t.order == "".join(s * 5 for s in t.stages)
    assert all(measured[i + 1].stages == measured[i].stages[::-1] for i in range(0, len(measured) - 1, 2))
    uri = f"sqlite:///{cwd}/mlruns/mlflow.db"
    df = runs(uri)
    b = df[df["tags.paired_baseline"].isna()].iloc[0]
    assert b["tags.paired_design"] == "alternating" and b["tags.inference_verdict"] == str(Verdict.SLOWER)
    assert 0.45 < b["metrics.inference_speedup"] < 0.55
    text = note(uri)
    assert "ran as whole workers one after another in each trial" in text

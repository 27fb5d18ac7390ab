"""`nnbench bisect`, paired: the search driven in-process through ab's own comparison, judge and store, with each
pair's bursts stood in by planted levels per version (no worker starts, no environment is built): it finds the step
in about log2(n) probes, slower or faster, stops in one line where a step stays inconclusive at --max-pairs, and
logs every step as an `ab` run under the bisect's parent, every burst kept."""
import math
import sys
import time
from types import SimpleNamespace

import mlflow
import pytest

from experiments.cli import ab
from experiments.cli import bisect as bisect_cli
from experiments.common.protocol import Burst, Point, Prepared
from experiments.harness import pairs
from experiments.harness.pairs import PairResult

VERSIONS = [f"1.{i}" for i in range(5)]
POINT = ["framework=torch", "model=mlp_relu", "batch_size=2", "ops=[inference]"]
DESIGN = pairs.Design(burst_s=0.001, rounds=3, pairs=6, max_pairs=12)


def side(job, label: str, cache=None) -> pairs.Side:
    """A side of the tiny point: what `pairs.compare` reads of it (its workers are stood in)."""
    return pairs.Side(label, SimpleNamespace(framework="torch", points=[Point(2, ("inference",))]), sys.executable,
                      {}, "fork", 10.0)


@pytest.fixture
def planted(monkeypatch):
    """`levels(version -> time per call)` and the spread of the pairs' log ratios stand in for the pairs' workers:
    pair k of a comparison reads log(B/A) = log(level B / level A) ± spread (alternating sign), in every round."""
    said = {}

    def plant(levels: dict[str, float], spread: float):
        said.update(levels=levels, spread=spread, pairs=[])

        def run_pair(a, b, point, design, index, servers, directory, rng):
            va, vb = (s.label.split("==")[1] for s in (a, b))
            jitter = spread * (1 if index % 2 == 0 else -1)
            ta, tb = levels[va] * 1e-3, levels[vb] * 1e-3 * math.exp(jitter)
            said["pairs"].append((va, vb, index))
            prepared = [Prepared("ok", environment={"nnbench_planted_version": v}) for v in (va, vb)]
            return PairResult(index, "AB" * design.rounds, *prepared, [Burst([ta]) for _ in range(design.rounds)],
                              [Burst([tb]) for _ in range(design.rounds)], wall_s=0.0)

        monkeypatch.setattr(pairs, "run_pair", run_pair)
        monkeypatch.setattr(pairs, "server", lambda side, log: None)
        job = SimpleNamespace(config=SimpleNamespace(model={"name": "mlp_relu"}, framework=SimpleNamespace(
            name="torch")), variant="torch-eager fp32")
        monkeypatch.setattr(ab, "checked", lambda key, vs, overrides, labels: ab.Comparison(
            key, tuple(vs), tuple(labels), overrides, ([job], [job])))
        monkeypatch.setattr(pairs.Side, "of", side)
        return said

    return plant


def bisected(uri: str, threshold: float = 0.03):
    """A paired bisect of VERSIONS on the tiny point, each version's environment this interpreter."""
    a = SimpleNamespace(package="nnbench-planted", range="1.0..1.4", overrides=POINT, experiment="nnbench",
                        threshold=threshold, alpha=0.05, repeats=1)
    job = SimpleNamespace(config=SimpleNamespace(model={"name": "mlp_relu"}), variant="torch-eager fp32",
                          points=[SimpleNamespace(batch_size=2, ops=("inference",))])
    b = bisect_cli.Paired(a, uri, job, VERSIONS, None, "uv", None, DESIGN)
    b.envs = {v: SimpleNamespace(python=sys.executable) for v in VERSIONS}
    return b


def runs_since(uri: str, t0: float):
    mlflow.set_tracking_uri(uri)
    return mlflow.search_runs(experiment_names=["nnbench"], filter_string=f"attributes.start_time >= {int(t0 * 1e3)}")


@pytest.mark.parametrize("at,level,verdict", [("1.3", 1.05, "slower"), ("1.1", 1.05, "slower"),
                                              ("1.4", 1.05, "slower"), ("1.2", 0.95, "faster")])
def test_the_planted_step_is_found_in_log2_steps(planted, paired_store, capsys, at, level, verdict):
    said = planted({v: level if v >= at else 1.0 for v in VERSIONS}, 0.01)
    b, t0 = bisected(paired_store), time.time()
    assert b.run() == 0
    out = capsys.readouterr().out
    before = VERSIONS[VERSIONS.index(at) - 1]
    assert f"first changed at nnbench-planted {at} ({before} → {at}): ×{level:.3f}" in out, out
    assert f"{verdict}, 6 pairs" in out.split("first changed at")[1].splitlines()[0]
    probes = [r for r in b.steps if r["a"] == "nnbench-planted==1.0"]
    assert len(probes) == 1 + math.ceil(math.log2(len(VERSIONS) - 1))  # the ends, then one per halving
    assert [r["verdict"] for r in probes][0] == verdict
    compared = {(va, vb) for va, vb, _ in said["pairs"]}
    assert (before, at) in compared  # the first changed version against its neighbour, paired
    assert len(compared) == len(b.steps) and all(r["pairs"] == 6 for r in b.steps)  # each comparison once

    df = runs_since(paired_store, t0)
    (parent,) = df[df["tags.nnbench.bisect"] == "true"].to_dict("records")
    assert parent["status"] == "FINISHED" and parent["tags.first_changed"] == at
    assert parent["tags.verdict"] == verdict and f"first changed at nnbench-planted {at}" in parent[
        "tags.mlflow.note.content"]
    steps = df[df["tags.nnbench.ab"] == "true"]
    assert set(steps["tags.mlflow.parentRunId"]) == {parent["run_id"]} and len(steps) == len(b.steps)
    points = df[df["tags.nnbench.ab_point"] == "true"]
    assert set(points["tags.mlflow.parentRunId"]) == set(steps["run_id"]) and set(points["status"]) == {"FINISHED"}
    kept = mlflow.artifacts.load_dict(f"runs:/{points['run_id'].iloc[0]}/bursts.json")
    assert len(kept["pairs"]) == 6 and all(len(p["a"]) == len(p["b"]) == DESIGN.rounds for p in kept["pairs"])


def test_no_change_between_the_ends_stops_there(planted, paired_store, capsys):
    planted({v: 1.0 for v in VERSIONS}, 0.01)
    b = bisected(paired_store)
    assert b.run() == 0
    assert "no change found: the ends 1.0 and 1.4 don't differ (×1.000" in capsys.readouterr().out
    assert len(b.steps) == 1


def test_an_inconclusive_step_adds_pairs_then_stops_in_one_line(planted, paired_store, capsys):
    """1.1 reads 2% slower than 1.0 with pairs 3% apart: neither beyond 3% nor within it at 12 pairs. The ends
    (6% apart) moved the range; the bisect names the step and where the change lies, and exits 1."""
    said = planted({"1.0": 1.0, "1.1": 1.02, "1.2": 1.06, "1.3": 1.06, "1.4": 1.06}, 0.03)
    b, t0 = bisected(paired_store), time.time()
    assert b.run() == 1
    out = capsys.readouterr().out
    (line,) = [ln for ln in out.splitlines() if ln.startswith("inconclusive")]
    assert line.startswith("inconclusive: 1.1 against the start 1.0: ×1.020 ["), line
    assert "inconclusive, 12 pairs, neither beyond nor within ±3%" in line and "(1.0..1.2): not guessing" in line
    assert "first changed" not in out
    assert [n for va, vb, n in said["pairs"] if vb == "1.1"] == list(range(12))  # 6, then 3 and 3 more
    df = runs_since(paired_store, t0)
    (parent,) = df[df["tags.nnbench.bisect"] == "true"].to_dict("records")
    assert parent["status"] == "FINISHED" and parent["tags.verdict"] == "inconclusive"
    assert parent["tags.first_changed"] == "none" and line in parent["tags.mlflow.note.content"]


def test_an_interrupt_in_a_step_ends_the_bisect_killed(planted, paired_store, monkeypatch):
    planted({v: 1.0 for v in VERSIONS}, 0.01)

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(pairs, "run_pair", interrupted)
    b, t0 = bisected(paired_store), time.time()
    assert b.run() == 130
    df = runs_since(paired_store, t0)
    assert set(df[df["tags.nnbench.bisect"] == "true"]["status"]) == {"KILLED"}
    assert "RUNNING" not in set(df["status"])

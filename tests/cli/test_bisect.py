"""`nnbench bisect`, paired: each step a two-environment paired sweep along runtime.python. The search is driven
in-process with each step's sweep stood in by planted levels per version (its records written as the sweep writes
them, read back by the real `compare.paired.verdicts`): it finds the step in about log2(n) probes, slower or faster,
stops where the ends don't differ, stops in one line (exit 1) where a step stays inconclusive at --max-pairs, and ends
KILLED on an interrupt. End to end, on nnbench-planted's environments, it finds and places a planted regression."""
import math
import re
import time
from types import SimpleNamespace

import mlflow
import pytest

from experiments.compare import across_envs, bisection, paired, upstream
from experiments.stats.paired import PAIRED, judge_pairs
from experiments.stats.verdicts import Verdict
from experiments.selfcheck import planted as plant
from tests.cli.conftest import PLANTED_POINT, paired_point
from tests.helpers import nnbench, with_store

VERSIONS = [f"1.{i}" for i in range(5)]
DESIGN = paired.Design(pairs=6, max_pairs=12, bursts=3, burst_ms=1, threshold=0.03, alpha=0.05)
SLUG = "planted-torch-eager-fp32-bs32"


def label(version: str) -> str:
    """A side's label in the paired sweep along runtime.python (cells.labels)."""
    return f"torch-eager fp32 runtime.python={plant.PROJECT}=={version}"


@pytest.fixture
def planted_steps(monkeypatch):
    """`plant(levels: version -> time per call, spread)` stands in for each step's sweep: trial k of a step reads
    log(B/A) = log(level B / level A) ± spread (alternating sign); the sweep judges DESIGN.pairs trials, and
    DESIGN.max_pairs where that is inconclusive, and saves B's point record as the paired sweep does. What each
    step's sweep was asked is said: (A, B, trials, parent run, exit code)."""
    said = {"steps": [], "code": 0}

    def plant_(levels: dict[str, float], spread: float):
        def sweep(overrides, directory, uri, experiment, parent=None, quiet=False):
            va, vb = re.findall(r"/envs/([^/]+)/bin/python", overrides[0])
            for n in (DESIGN.pairs, DESIGN.max_pairs):
                log_ratios = [math.log(levels[vb] / levels[va]) + spread * (-1) ** k for k in range(n)]
                (c,) = judge_pairs([log_ratios], DESIGN.threshold, DESIGN.alpha)
                if c.conclusive:
                    break
            said["steps"].append((va, vb, n, parent, overrides))
            if said["code"]:
                return said["code"]
            paired_point(directory, label(vb), label(va), c, {"model": plant.NAME, "ops": "inference",
                                                               "batch_size": "32"}, SLUG)
            return 0

        monkeypatch.setattr(paired, "sweep", sweep)
        return said

    return plant_


def bisected(uri: str, issue=None) -> tuple[int, dict]:
    """A paired bisect of VERSIONS on the planted network's one cell, each version's environment at /envs/<v> (a
    draft of the first change into the folder `issue`, as --issue asks): its exit code and answer."""
    sweep = across_envs.Sweep("bisect", tuple(PLANTED_POINT), uri, "nnbench")
    b = bisection.Bisection(plant.PROJECT, "1.0..1.4", sweep, None, DESIGN.threshold, DESIGN.alpha, DESIGN,
                            issue=issue)
    job = SimpleNamespace(config=SimpleNamespace(model={"name": plant.NAME}), variant="torch-eager fp32",
                          points=[SimpleNamespace(batch_size=32, ops=("inference",))])
    r = across_envs.Range(plant.PROJECT, VERSIONS, None)
    r.envs = {v: SimpleNamespace(python=f"/envs/{v}/bin/python") for v in VERSIONS}
    return bisection.searched(b, r, job)


def runs_since(uri: str, t0: float):
    mlflow.set_tracking_uri(uri)
    return mlflow.search_runs(experiment_names=["nnbench"], filter_string=f"attributes.start_time >= {int(t0 * 1e3)}")


@pytest.mark.parametrize("at,level,verdict", [("1.3", 1.05, "slower"), ("1.1", 1.05, "slower"),
                                              ("1.4", 1.05, "slower"), ("1.2", 0.95, "faster")])
def test_the_planted_step_is_found_in_log2_steps(planted_steps, paired_store, capsys, at, level, verdict):
    said = planted_steps({v: level if v >= at else 1.0 for v in VERSIONS}, 0.01)
    t0 = time.time()
    code, answer = bisected(paired_store)
    assert code == 0
    out = capsys.readouterr().out
    before = VERSIONS[VERSIONS.index(at) - 1]
    assert f"first changed at nnbench-planted {at} ({before} → {at}): ×{level:.3f}" in out, out
    assert f"{verdict}, 6 pairs" in out.split("first changed at")[1].splitlines()[0]
    probes = [r for r in answer["steps"] if r["a"] == "nnbench-planted==1.0"]
    assert len(probes) == 1 + math.ceil(math.log2(len(VERSIONS) - 1))  # the ends, then one per halving
    assert probes[0]["verdict"] == verdict and probes[0]["b"] == "nnbench-planted==1.4"
    compared = [(va, vb) for va, vb, *_ in said["steps"]]
    assert (before, at) in compared  # the first changed version against its neighbour, paired
    assert len(set(compared)) == len(compared) == len(answer["steps"])  # each comparison once
    assert all(r["pairs"] == 6 and r["ratio"] is not None for r in answer["steps"])

    df = runs_since(paired_store, t0)
    (parent,) = df[df["tags.nnbench.bisect"] == "true"].to_dict("records")
    assert parent["status"] == "FINISHED" and parent["tags.first_changed"] == at
    assert parent["tags.verdict"] == verdict and f"first changed at nnbench-planted {at}" in parent[
        "tags.mlflow.note.content"]
    for _, _, _, under, overrides in said["steps"]:  # each step: the paired sweep along the environments
        assert under == parent["run_id"] and "report.along=runtime.python" in overrides
        assert {"bench.processes=6", "bench.max_processes=12", "bench.rounds=3"} <= set(overrides)


def test_the_first_change_goes_to_the_upstream_drafter_with_the_bisect_s_command(planted_steps, paired_store,
                                                                                 monkeypatch, tmp_path, capsys):
    """--issue DIR: the first change's step (its sweep's verdicts, as the paired report reads them) is what the
    upstream drafter is given, with the bisect's own command (the drafter's exports, script and draft are run end to
    end by test_versions.py)."""
    planted_steps({v: 1.05 if v >= "1.3" else 1.0 for v in VERSIONS}, 0.01)
    asked = []
    monkeypatch.setattr(upstream, "drafts", lambda rows, sweep, out, command: asked.append(
        (rows, sweep, out, command)) or [out / "cell" / "draft.md"])
    assert bisected(paired_store, issue=tmp_path / "drafts")[0] == 0
    ((rows, sweep, out, command),) = asked
    assert out == tmp_path / "drafts" and sweep.name == "1.2-1.3"
    assert command == f"nnbench bisect {plant.PROJECT} 1.0..1.4 {' '.join(PLANTED_POINT)}"
    (row,) = rows
    assert (row.variant, row.baseline, row.verdict) == (label("1.3"), label("1.2"), Verdict.SLOWER)
    assert f"upstream draft: {tmp_path / 'drafts' / 'cell' / 'draft.md'}" in capsys.readouterr().err


def test_no_change_between_the_ends_stops_there(planted_steps, paired_store, capsys):
    said = planted_steps({v: 1.0 for v in VERSIONS}, 0.01)
    assert bisected(paired_store)[0] == 0
    assert "no change found: the ends 1.0 and 1.4 don't differ (×1.000" in capsys.readouterr().out
    assert [(va, vb) for va, vb, *_ in said["steps"]] == [("1.0", "1.4")]


def test_an_inconclusive_step_stops_in_one_line(planted_steps, paired_store, capsys):
    """1.1 reads 2% slower than 1.0 with trials 3% apart: neither beyond 3% nor within it at 12 pairs. The ends
    (6% apart) moved the range; the bisect names the step and where the change lies, and exits 1."""
    said = planted_steps({"1.0": 1.0, "1.1": 1.02, "1.2": 1.06, "1.3": 1.06, "1.4": 1.06}, 0.03)
    t0 = time.time()
    assert bisected(paired_store)[0] == 1
    out = capsys.readouterr().out
    (line,) = [ln for ln in out.splitlines() if ln.startswith("inconclusive")]
    assert line.startswith("inconclusive: 1.1 against the start 1.0: ×1.020 ["), line
    assert "inconclusive, 12 pairs, MDE ×1.030, neither beyond nor within ±3%" in line
    assert "(1.0..1.2): not guessing" in line
    assert "raise --max-pairs (now 12)" in line and "first changed" not in out
    assert [n for _, vb, n, *_ in said["steps"] if vb == "1.1"] == [DESIGN.max_pairs]
    df = runs_since(paired_store, t0)
    (parent,) = df[df["tags.nnbench.bisect"] == "true"].to_dict("records")
    assert parent["status"] == "FINISHED" and parent["tags.verdict"] == "inconclusive"
    assert parent["tags.first_changed"] == "none" and line in parent["tags.mlflow.note.content"]


def test_an_interrupted_step_ends_the_bisect_killed_and_says_nothing_more(planted_steps, paired_store, capsys):
    """A step's sweep stopped by a signal (it said so in its own line, exit 130): the bisect stops searching, ends
    its parent KILLED and returns 130 without a line of its own."""
    said = planted_steps({v: 1.0 for v in VERSIONS}, 0.01)
    said["code"] = 130
    t0 = time.time()
    assert bisected(paired_store) == (130, {})
    assert len(said["steps"]) == 1 and not capsys.readouterr().err
    df = runs_since(paired_store, t0)
    assert list(df["status"]) == ["KILLED"] and list(df["tags.nnbench.bisect"]) == ["true"]


@pytest.mark.slow
def test_a_planted_regression_is_found_and_placed(planted, tmp_path):
    """nnbench-planted 1.0.1..1.2 (1.1 and 1.2 do 60% more work than 1.0.1): the ends are compared paired, then 1.1
    against the start, which is the first changed version's step too: two paired sweeps, nested under the bisect's
    parent, the regression placed at 1.1, and where the time went said (matmul: both sides profiled by default)."""
    uri = f"sqlite:///{with_store(tmp_path)}/mlruns/mlflow.db"
    with planted.offline():
        r = nnbench("bisect", [plant.PROJECT, "1.0.1..1.2", "--index-url", planted.url, *PLANTED_POINT, "--pairs", "2",
                               "--max-pairs", "6", "--bursts", "5", "--threshold", "10%", "--uri", uri], tmp_path)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    head = next(ln for ln in r.stdout.splitlines() if ln.startswith("first changed at"))
    assert head.startswith(f"first changed at {plant.PROJECT} 1.1 (1.0.1 → 1.1): ×") and ", slower, " in head, head
    where = r.stdout.splitlines()[r.stdout.splitlines().index(head) + 1]  # profiled by default: its 60% more matmuls
    assert where.startswith("  1.0.1 → 1.1: the change: ") and "matmul +" in where, where
    assert "2 paired comparisons, measuring 3 of 3 versions (1.0.1, 1.1, 1.2)" in r.stdout, r.stdout[-3000:]
    df = runs_since(uri, 0)
    (bisect,) = df[df["tags.nnbench.bisect"] == "true"].to_dict("records")
    assert bisect["status"] == "FINISHED" and bisect["tags.first_changed"] == "1.1"
    assert bisect["tags.verdict"] == "slower"
    steps = df[df["tags.nnbench.sweep"] == "true"]
    assert len(steps) == 2 and set(steps["tags.mlflow.parentRunId"]) == {bisect["run_id"]}
    assert set(steps["status"]) == {"FINISHED"}
    points = df[df["params.model"] == plant.NAME]
    assert set(points["status"]) == {"FINISHED"}
    assert set(points["tags.mlflow.parentRunId"]) == set(steps["run_id"]) and len(points) == 4
    assert sorted(points["tags.nnbench_planted_version"]) == ["1.0.1", "1.0.1", "1.1", "1.2"]
    slower = points[points["tags.inference_verdict"] == "slower"]
    assert sorted(slower["tags.nnbench_planted_version"]) == ["1.1", "1.2"]
    assert (slower[f"metrics.inference_{PAIRED[0]}"] < 1 / 1.1).all()  # speedup: 1.0.1's time over theirs

"""`nnbench ab`, the paired sweep along one axis, through its real door: bad input is one line and exit 2 before
anything runs; two values compared into a real store, the verdicts printed as a table or as JSON (schema
nnbench.paired/1), every burst kept; --fail-on-regression exits 1 naming a planted slowdown and 0 on an A/A;
--profile says where a planted slowdown's time went; a store that goes away and a Ctrl-C are one line each and leave
nothing RUNNING. Where the numbers don't matter, the interpreter that stands in for a worker
(tests/helpers/fake_worker.py: every burst reads 1 ms) measures."""
import json
import signal

import pytest

from experiments.cli import main
from experiments.compare import paired
from experiments.harness import manager
from experiments.harness.pairs import TRIAL, Trial
from experiments.stats.verdicts import Verdict
from experiments.selfcheck import planted as plant
from tests.cli.conftest import PLANTED_POINT
from tests.helpers import BRIEF, fake_interpreter, nnbench, runs, with_store
from tests.helpers.interrupts import during

POINT = ["framework=torch", "model=mlp_relu", "batch_size=2", "ops=[inference]", *BRIEF, "parity=false"]
DESIGN = ["--pairs", "2", "--bursts", "5"]


def exit_code(argv: list[str]) -> int:
    """main's return code, or its exit code where argparse's own errors exit."""
    try:
        return main(argv)
    except SystemExit as e:
        return e.code


@pytest.mark.parametrize("argv,message", [
    (["framework.compile=true"], "'framework.compile=true' gives one value: a paired comparison needs two or more"),
    (["model=lenet,resnet"], "model fixes a cell, so its values can't be paired: compare values of framework, "),
    (["batch_size=2,4", "framework=torch"], "batch_size fixes a cell"),
    (["framwork=jax,torch", "model=lenet"], "framwork is not a key of the config (did you mean framework?)"),
    (["framework=[jax"], "'framework=[jax' is not AXIS=A,B ("),
    (["framework=jax,torch", "framework=jax"], "framework is the axis compared: set it only once"),
    (["framework=external,torch", "external.name=Reference",
      "external.command='python runners/reference_runner.py --model {model}'"],
     "framework=external can't be paired: its runner times itself"),
    (["framework.compile=true,false", "model=nosuch"], "unknown model 'nosuch'"),
    (["framework.threads=1,2", "--pairs", "3", "--max-pairs", "2"], "--max-pairs 2 is below --pairs 3"),
    (["framework.threads=1,2", "framework=torch", "--max-pairs", "3"],
     "--max-pairs 3 is below --pairs 5 (bench.processes of the bench preset)"),
    (["framework.threads=1,2", "--pairs", "1"], "--pairs 1: at least 2 (one pair gives no verdict)"),
    (["framework.threads=1,2", "--bursts", "0"], "argument --bursts: --bursts 0 must be above 0"),
    (["framework.threads=1,2", "--burst-ms", "-5"], "argument --burst-ms: --burst-ms -5 must be above 0"),
    (["framework.threads=1,2", "--burst-ms", "nan"], "argument --burst-ms: "),
    (["framework.threads=1,2", "--alpha", "1.5"], "--alpha 1.5 is not between 0 and 1"),
    (["framework.threads=1,2", "--threshold", "5"], "--threshold 5 would be 500%: use 0.05 or 5%"),
    (["framework.threads=1,2", "--pairs", "six"], "argument --pairs: "),
    (["framework.threads=1,2", "--rounds", "3"], "unrecognized arguments: --rounds"),
])
def test_bad_input_is_one_line_and_exit_2_before_anything_runs(capsys, argv, message, tmp_path, monkeypatch):
    swept, probed = [], []  # found before the probes too: each imports a framework
    monkeypatch.setattr(paired, "sweep", lambda *args, **kw: swept.append(args) or 0)
    monkeypatch.setattr(manager, "probe", lambda asks: probed.append(asks) or [(None, None)] * len(asks))
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    assert exit_code(["ab", *argv, "--uri", uri, "--out", str(tmp_path / "out")]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("nnbench ab: error: ") and message in line, line
    assert not swept and not probed and not (tmp_path / "out").exists() and not (tmp_path / "mlflow.db").exists()


@pytest.fixture(scope="module")
def a_a(tmp_path_factory):
    """One A/A comparison through the door (`framework.threads=1,1`: the two sides alike in every key, so the second
    is told apart by its place), measured by the stand-in worker, as JSON, gated: (its process, sweep dir, store)."""
    tmp = with_store(tmp_path_factory.mktemp("a-a"))
    out, uri = tmp / "sweep", f"sqlite:///{tmp}/mlruns/mlflow.db"
    r = nnbench("ab", ["framework.threads=1,1", *POINT, f"runtime.python={fake_interpreter(tmp)}", *DESIGN, "--json",
                       "--fail-on-regression", "--out", str(out), "--uri", uri], tmp, FAKE_FAULT="none")
    return r, out, uri


# nnbench.paired/1 (docs/comparing.md#the-json): each key and the types its value may take. A field renamed, retyped
# or dropped fails here; a new one is no new version.
ABOUT = {"schema": str, "command": str, "axis": str, "sweep_dir": str, "exit": int, "cells": list}
CELL = {"model": str, "op": str, "batch_size": int, "variant": str, "baseline": str, "speedup": (float, type(None)),
        "low": (float, type(None)), "high": (float, type(None)), "verdict": str, "trials": int,
        "run_id": (str, type(None)), "differs": str, "ratio": (float, type(None)), "interval": list,
        "profile": (dict, type(None))}


@pytest.mark.slow
def test_the_json_keeps_its_schema(a_a):
    r, out, _ = a_a
    got = json.loads(r.stdout)
    assert got["schema"] == paired.SCHEMA == "nnbench.paired/1"
    for key, kind in ABOUT.items():
        assert isinstance(got[key], kind), (key, got[key])
    (cell,) = got["cells"]
    for key, kind in CELL.items():
        assert isinstance(cell[key], kind), (key, cell[key])
    typed = set(paired.CellVerdict.__dataclass_fields__) - {"judged"}  # every field of the typed row is in the JSON,
    judged = {"speedup", "low", "high", "verdict", "trials", "ratio", "interval", "mde"}  # its judgement's flattened
    assert typed | judged <= set(cell)
    assert len(cell["interval"]) == 2 and all(isinstance(x, (float, type(None))) for x in cell["interval"])
    assert cell["verdict"] in {str(v) for v in Verdict}
    assert (got["command"], got["axis"], got["sweep_dir"], got["exit"]) == ("ab", "framework.threads", str(out), 0)


@pytest.mark.slow
def test_an_a_a_comparison_reads_no_change_and_passes_the_gate(a_a):
    """Both sides' bursts read alike: B/A is 1 in every trial, no change, and --fail-on-regression exits 0."""
    r, _, _ = a_a
    assert r.returncode == 0, r.stderr[-3000:]
    assert not [ln for ln in r.stderr.splitlines() if "error" in ln], r.stderr[-3000:]
    (cell,) = json.loads(r.stdout)["cells"]
    assert (cell["model"], cell["op"], cell["batch_size"]) == ("mlp_relu", "inference", 2)
    assert (cell["variant"], cell["baseline"]) == ("torch-eager fp32 (2)", "torch-eager fp32")
    assert cell["verdict"] == "no change" and cell["ratio"] == cell["speedup"] == 1.0
    assert cell["interval"] == [1.0, 1.0] and cell["trials"] == 2


@pytest.mark.slow
def test_the_sweep_is_logged_and_every_burst_is_kept(a_a):
    """One FINISHED parent, one FINISHED run per side: B's carries its verdict against A, A's says it is the
    baseline; the sweep dir keeps each trial with every burst of both sides."""
    r, out, uri = a_a
    (cell,) = json.loads(r.stdout)["cells"]
    (parent,) = runs(uri, parents=True).itertuples()
    points = runs(uri).set_index("run_id")
    assert parent.status == "FINISHED" and set(points["status"]) == {"FINISHED"} and len(points) == 2
    assert set(points["tags.mlflow.parentRunId"]) == {parent.run_id}
    b = points.loc[cell["run_id"]]
    a = points.drop(index=cell["run_id"]).iloc[0]
    assert (b["tags.design"], b["tags.variant"], b["tags.compared_with"]) == (
        "paired", "torch-eager fp32 (2)", "torch-eager fp32")
    assert b["tags.inference_verdict"] == "no change" and b["metrics.inference_speedup_trials"] == 2
    assert b["params.config.report.along"] == "framework.threads" and b["metrics.inference_speedup"] == 1.0
    assert a["tags.paired_baseline"] == "true" and a["tags.variant"] == "torch-eager fp32"
    files = sorted(out.glob(f"*/trials/bs2-inference/{TRIAL.format('*')}"))
    assert len(files) == 2
    for f in files:
        trial = Trial.from_json(f.read_text())
        assert trial.failure is None and [len(t.bursts) for t in trial.turns] == [5, 5]
        assert trial.log_ratio(1, 0) == 0.0 and sorted(trial.order) == sorted("AB" * 5)


@pytest.mark.slow
def test_a_planted_slowdown_is_judged_slower_fails_the_gate_and_is_profiled(planted, tmp_path):
    """nnbench-planted 2.0's network makes twice 1.0's matmuls (a 30% step can read inconclusive on a busy machine),
    each version in its own environment: `ab runtime.python=ENV_1.0,ENV_2.0 --fail-on-regression --profile` prints the
    table with the cell slower, profiles both sides and names matmul in the console (the sweep's end) and the
    Markdown, the matmul op's calls per step doubled, both points' runs keep their profiles; and it exits 1 naming
    the cell in its one error line, the last."""
    pythons = ",".join(f"'{planted.python(v)}'" for v in ("1.0", "2.0"))
    out, uri, md = tmp_path / "sweep", f"sqlite:///{with_store(tmp_path)}/mlruns/mlflow.db", tmp_path / "md.md"
    r = nnbench("ab", [f"runtime.python={pythons}", *PLANTED_POINT, *DESIGN, "--max-pairs", "6", "--threshold", "10%",
                       "--fail-on-regression", "--profile", "--markdown", str(md), "--out", str(out), "--uri", uri],
                tmp_path)
    assert r.returncode == 1, r.stdout[-3000:] + r.stderr[-3000:]
    (row,) = paired.verdicts(out)
    assert row.verdict == Verdict.SLOWER and row.ratio > 1.3, row
    assert row.variant.endswith("runtime.python=nnbench-planted==2.0")
    assert row.baseline.endswith("runtime.python=nnbench-planted==1.0")
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("nnbench")]
    assert errors == [r.stderr.strip().splitlines()[-1]] == [f"nnbench ab: error: slower: {paired.slower([row])[0]}"]
    assert errors[0].startswith("nnbench ab: error: slower: planted inference bs32 ")
    assert f"{row.ratio:.3f}×" in errors[0]
    table = r.stdout[r.stdout.index("paired: each B over its A (above 1: B is slower)"):]
    (cells,) = [ln for ln in table.splitlines() if ln.startswith("| planted")]
    shown = [c.strip() for c in cells.split("|")]  # the table drops a rounded ratio's trailing zeros: 1.3 for 1.300
    assert f"{round(row.ratio, 3):g}" in shown and "slower" in shown and "inference" in shown, cells

    change = row.profile
    assert "matmul" in [p.name for p in change.changed()]
    matmul = next(p for p in change.parts if p.name == "matmul")
    assert matmul.b_s > matmul.a_s
    assert any(o.category == "matmul" and o.b_calls == 2 * o.a_calls for o in change.ops), change.ops
    assert "matmul +" in change.said() and change.said() in md.read_text() and change.cost_s > 0
    said = r.stdout[r.stdout.index("where the time went, B's profile against A's:"):].splitlines()[1]
    assert said.startswith(f"{plant.NAME} inference bs32 ") and "(slower): the change: " in said and "matmul +" in said
    points = runs(uri)
    assert len(points) == 2 and (points["metrics.inference_time_matmul_s"] > 0).all()
    assert {change.a_wall_s, change.b_wall_s} == set(points["metrics.inference_median_s"])  # scaled to the timed steps
    assert {change.a_profiled_s, change.b_profiled_s} == set(points["metrics.inference_profile_wall_s"])
    assert set(points["tags.profile"]) == {"ok"}


@pytest.mark.slow
def test_a_store_that_goes_away_is_one_line_and_upload_closes_the_sweep(tmp_path):
    """The store's directory moves away while the trials run: the sweep can neither log its points nor close its
    parent; one line, exit 1, naming where the points are and `nnbench upload`. Once the store is back, that upload
    logs them and closes the parent: nothing is left RUNNING."""
    store = with_store(tmp_path / "store", "mlflow.db")
    out, uri = tmp_path / "sweep", f"sqlite:///{store}/mlflow.db"

    argv = ["ab", "framework.threads=1,2", *POINT, f"runtime.python={fake_interpreter(tmp_path)}", "--pairs", "3",
            "--bursts", "5", "--out", str(out), "--uri", uri]
    code, err, _ = during(argv, lambda: any(out.glob(f"*/trials/bs2-inference/{TRIAL.format(0)}")),
                          lambda proc: store.rename(tmp_path / "away"), FAKE_FAULT="none", FAKE_DELAY_S="0.5")
    (tmp_path / "away").rename(store)
    assert code == 1 and len(err) == 1, err
    assert err[0].startswith("nnbench: error: 2 finished, 0 skipped, 0 failed, 2 not logged"), err[0]
    assert f"the points are kept in {out}: nnbench upload {out} logs what the store lacks" in err[0]
    assert set(runs(uri, parents=True)["status"]) == {"RUNNING"} and runs(uri).empty  # as the store was left
    assert main(["upload", str(out), "--uri", uri]) == 0
    assert set(runs(uri, parents=True)["status"]) == {"FINISHED"}
    assert list(runs(uri)["status"]) == ["FINISHED", "FINISHED"]


@pytest.mark.slow
def test_ctrl_c_in_a_trial_is_one_line_130_and_leaves_nothing_running(tmp_path):
    """SIGINT while the second cell of the first trial is being prepared (its worker takes ten minutes): the
    workers are killed, the first cell's trial is kept, every point is logged KILLED, and the sweep's one line is
    all ab says."""
    out, uri = tmp_path / "sweep", f"sqlite:///{with_store(tmp_path)}/mlruns/mlflow.db"
    argv = ["ab", "framework.threads=1,2", *POINT, "ops=[inference,training]",
            f"runtime.python={fake_interpreter(tmp_path)}", *DESIGN, "--out", str(out), "--uri", uri]
    code, err, _ = during(argv, lambda: any(out.glob(f"*/trials/bs2-inference/{TRIAL.format(0)}")),
                          lambda proc: proc.send_signal(signal.SIGINT), FAKE_FAULT="none", FAKE_LONG_POINT="1")
    assert code == 130 and len(err) == 1, (code, err)
    assert err[0].startswith("nnbench: interrupted by SIGINT: ") and f"kept in {out}" in err[0], err[0]
    kept = Trial.from_json(next(out.glob(f"*/trials/bs2-inference/{TRIAL.format(0)}")).read_text())
    assert kept.failure is None and [len(t.bursts) for t in kept.turns] == [5, 5]
    assert set(runs(uri, parents=True)["status"]) == {"KILLED"}
    assert list(runs(uri)["status"]) == ["KILLED", "KILLED"]  # both sides' points, saved as interrupted

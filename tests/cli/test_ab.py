"""`nnbench ab`: bad input is one line and exit 2 before anything is measured or written; two values of an axis
compared paired end to end into a real sqlite store (a parent run, a child run per point, every burst kept); an
interrupt or a crash leaves no run RUNNING."""
import functools
import json
import time

import mlflow
import pytest

from experiments.cli import main
from experiments.cli.ab import checked as door
from experiments.harness import pairs
from experiments.harness.pairs import PAIR, PairResult
from experiments.measure.verdict import judge_pairs

POINT = ["framework=torch", "model=mlp_relu", "batch_size=2", "ops=[inference]"]


@pytest.mark.parametrize("argv,message", [
    (["framework.compile=true"], "'framework.compile=true' gives 0 values: nnbench ab compares two"),
    (["framework=jax,torch,external"], "gives 3 values: nnbench ab compares two"),
    (["framework=jax,torch", "framework=jax"], "framework is the axis compared: set it only in AXIS=A,B"),
    (["framework=external,torch", "external.name=Reference",
      "external.command='python runners/reference_runner.py --model {model}'"],
     "framework=external can't be paired: its runner times itself"),
    (["framework.compile=true,false", "model=nosuch"], "unknown model 'nosuch' (choose dscnn, file, gpt_tiny, lenet,"),
    (["framework.compile=true,false", "--pairs", "3", "--max-pairs", "2"], "--max-pairs 2 is below --pairs 3"),
    (["framework.compile=true,false", "--pairs", "1"], "--pairs 1: at least 2"),
    (["framework.compile=true,false", "--bursts", "0"], "--bursts 0: at least 1"),
    (["framework.compile=true,false", "--burst-ms", "-5"], "--burst-ms -5: a positive length"),
    (["framework.compile=true,false", "--burst-ms", "nan"], "--burst-ms nan: a positive length"),
    (["framework.compile=true,false", "--alpha", "1.5"], "--alpha 1.5: a significance level in (0, 1)"),
    (["framework.compile=true,false", "--threshold", "5"], "--threshold 5 would be 500%: use 0.05 or 5%"),
    (["framework.compile=true,false", "--pairs", "six"], "argument --pairs: invalid int value: 'six'"),
    (["framework.compile=true,false", "--rounds", "3"], "unrecognized arguments: --rounds"),
])
def test_bad_input_is_one_line_and_exit_2(capsys, argv, message, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert exit_code(["ab", *argv]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("nnbench ab: error: ") and message in line, line
    assert not (tmp_path / "mlruns").exists()  # nothing written to the store


def exit_code(argv: list[str]) -> int:
    """main's return code, or its exit code where argparse's own errors exit."""
    try:
        return main(argv)
    except SystemExit as e:
        return e.code


def runs_since(uri: str, t0: float):
    """The runs of the store started at or after `t0` (time.time())."""
    mlflow.set_tracking_uri(uri)
    return mlflow.search_runs(experiment_names=["nnbench"], filter_string=f"attributes.start_time >= {int(t0 * 1e3)}")


def test_percent_threshold_reads_as_a_fraction():
    from experiments.cli.ab import fraction

    assert fraction("3%") == pytest.approx(0.03) and fraction("0.05") == 0.05


@pytest.mark.slow
def test_two_values_are_compared_paired_logged_and_every_burst_is_kept(tmp_path, capsys, paired_store, monkeypatch):
    """An A/A comparison (framework.threads=1 on both sides) of a tiny point: a ratio, an interval, a verdict, printed
    as JSON and logged: one FINISHED parent with the sides and the verdicts, one FINISHED child for the point. (The
    sides' jobs come from the door once per module: `checked`.)"""
    from experiments.cli import ab

    monkeypatch.setattr(ab, "checked", lambda *args: checked() if args == ("framework.threads", ["1", "1"], POINT)
                        else door(*args))
    uri, t0 = paired_store, time.time()
    argv = ["ab", "framework.threads=1,1", *POINT, "--pairs", "2", "--max-pairs", "2", "--bursts", "3",
            "--burst-ms", "5", "--json", "--out", str(tmp_path / "out"), "--uri", uri]
    assert main(argv) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert row["point"] == {"model": "mlp_relu", "op": "inference", "batch_size": 2}
    assert row["pairs"] == 2 and row["bursts"] == 3 and row["skipped"] is None and row["variant"] == "torch-eager fp32"
    lo, hi = row["interval"]
    assert lo <= row["ratio"] <= hi
    assert set(row["oversubscribed"]) <= {"A", "B"}  # per side: in how many pairs, and the hint
    files = sorted((tmp_path / "out").glob(f"job-0/bs2-inference/pair-*/{PAIR}"))
    assert len(files) == 2
    for f in files:
        pair = PairResult.from_json(f.read_text())
        assert pair.ok and len(pair.a_bursts) == len(pair.b_bursts) == 3 and pair.a.threads == pair.b.threads == 1
    # the verdict is the judge's on the pairs kept (an A/A pair of a 10 µs op may well read "faster" on a loaded
    # machine: two pairs bound nothing)
    (v,) = judge_pairs([[PairResult.from_json(f.read_text()).log_ratio for f in files]])
    assert (row["verdict"], row["ratio"]) == (v.verdict, pytest.approx(v.ratio))

    df = runs_since(uri, t0)
    assert set(df["status"]) == {"FINISHED"} and len(df) == 2
    parent = df[df["tags.nnbench.ab"] == "true"].iloc[0]
    child = df[df["tags.nnbench.ab_point"] == "true"].iloc[0]
    assert parent["tags.ab_a"] == parent["tags.ab_b"] == "framework.threads=1"
    assert row["verdict"] in parent["tags.mlflow.note.content"] and parent["params.bursts"] == "3"
    assert child["tags.mlflow.parentRunId"] == parent["run_id"] == child["tags.mlflow.parentRunId"]
    assert child["run_id"] == row["run_id"] and child["tags.verdict"] == row["verdict"]
    assert child["tags.paired"] == "true" and child["params.model"] == "mlp_relu" and child["params.op"] == "inference"
    assert child["params.batch_size"] == "2" and child["metrics.pairs"] == 2
    assert child["params.variant"] == row["variant"]
    assert (child["metrics.ratio"], child["metrics.ci95_low"], child["metrics.ci95_high"]) == pytest.approx(
        (row["ratio"], lo, hi))
    kept = mlflow.artifacts.load_dict(f"runs:/{child['run_id']}/bursts.json")
    assert [len(p["a"]) for p in kept["pairs"]] == [len(p["b"]) for p in kept["pairs"]] == [3, 3]
    assert kept["pairs"][0]["a"] == [b.samples_s for b in PairResult.from_json(files[0].read_text()).a_bursts]


def test_the_table_names_the_variant_where_the_points_have_several():
    """`ab runtime.python=A,B framework=jax,torch`: the same model, op and batch twice, told apart by the variant."""
    from experiments.cli.ab import table

    row = {"point": {"model": "lenet", "op": "inference", "batch_size": 2}, "a": "A", "b": "B", "ratio": 1.0,
           "interval": [0.99, 1.01], "verdict": "no change", "pairs": 6, "skipped": None}
    one = table([row | {"variant": "jax-jit fp32"}])
    two = table([row | {"variant": "jax-jit fp32"}, row | {"variant": "torch-eager fp32"}])
    assert "variant" not in one and "| variant" in two and "jax-jit fp32" in two and "torch-eager fp32" in two


@pytest.mark.parametrize("fault", [KeyboardInterrupt, RuntimeError])
def test_an_interrupt_or_a_crash_leaves_no_run_running(tmp_path, monkeypatch, capsys, fault, paired_store):
    """A Ctrl-C while measuring: one line, the parent KILLED (`ab` exits 130); a crash: the parent FAILED, and the
    error goes on. (Both before any worker starts: the store's side only, with a real comparison's jobs.)"""
    from experiments.cli import ab

    def broken(*args, **kwargs):
        raise fault("while measuring")

    monkeypatch.setattr(pairs, "compare", broken)
    comparison, design, t0 = checked(), pairs.Design(pairs=2, max_pairs=2, rounds=3), time.time()
    logged = ab.Store.open(paired_store, "nnbench", comparison, design)
    if fault is KeyboardInterrupt:
        assert ab.measure(comparison, design, 0.03, 0.05, tmp_path, logged) is None  # run() then returns 130
        (line,) = capsys.readouterr().err.strip().splitlines()
        assert line.startswith(f"nnbench ab: interrupted: 0 points logged under {logged.parent}"), line
    else:
        with pytest.raises(fault):
            ab.measure(comparison, design, 0.03, 0.05, tmp_path, logged)
    (status,) = runs_since(paired_store, t0)["status"]
    assert status == ("KILLED" if fault is KeyboardInterrupt else "FAILED")


@functools.cache
def checked():
    """Both sides' jobs of an A/A comparison of the tiny point, through the sweep's door once (it takes seconds)."""
    return door("framework.threads", ["1", "1"], POINT)


def test_a_ctrl_c_keeps_the_points_judged_in_the_interrupted_job(tmp_path, monkeypatch, capsys, paired_store):
    """A Ctrl-C in a job after some of its points had their pairs: those are judged together and logged, then the
    parent ends KILLED."""
    from experiments.cli import ab

    (judged,) = judge_pairs([[0.01, 0.012, 0.009]], 0.03, 0.05)

    def stopped(*args, **kwargs):
        c = pairs.Compared(2, "inference")
        c.verdict = judged
        raise pairs.Stopped([c])

    monkeypatch.setattr(pairs, "compare", stopped)
    comparison, design, t0 = checked(), pairs.Design(pairs=2, max_pairs=2, rounds=3), time.time()
    logged = ab.Store.open(paired_store, "nnbench", comparison, design)
    assert ab.measure(comparison, design, 0.03, 0.05, tmp_path, logged) is None
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"nnbench ab: interrupted: 1 point logged under {logged.parent}"), line
    df = runs_since(paired_store, t0)
    child = df[df["tags.nnbench.ab_point"] == "true"].iloc[0]
    assert sorted(df["status"]) == ["FINISHED", "KILLED"] and child["tags.verdict"] == str(judged.verdict)
    assert child["metrics.ratio"] == pytest.approx(judged.ratio) and child["params.batch_size"] == "2"


def test_a_store_that_goes_away_is_one_line_naming_where_the_pairs_are(tmp_path, monkeypatch, paired_store):
    from experiments.cli import ab
    from experiments.common.errors import Lost

    (judged,) = judge_pairs([[0.01, 0.012, 0.009]], 0.03, 0.05)

    def compared(*args, **kwargs):
        c = pairs.Compared(2, "inference")
        c.verdict = judged
        return [c]

    def gone(*args, **kwargs):
        raise ConnectionError("[Errno 111] Connection refused")

    monkeypatch.setattr(pairs, "compare", compared)
    comparison, design, t0 = checked(), pairs.Design(pairs=2, max_pairs=2, rounds=3), time.time()
    logged = ab.Store.open(paired_store, "nnbench", comparison, design)
    monkeypatch.setattr(ab.Store, "point", gone)
    with pytest.raises(Lost) as e:
        ab.measure(comparison, design, 0.03, 0.05, tmp_path, logged)
    assert "Connection refused" in str(e.value) and f"every pair measured is in {tmp_path}" in str(e.value)
    assert "\n" not in str(e.value)
    (status,) = runs_since(paired_store, t0)["status"]
    assert status == "FAILED"

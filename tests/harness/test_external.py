"""framework=external: a runner in any language in a worker's place, read in seed 000's lines; in a sweep, its jobs
are measured on their own (unpaired) beside the paired ones."""
import re
import sys

import pandas as pd
import pytest
from mlflow.tracking import MlflowClient

from experiments.common.lines import Parsed, parse
from experiments.harness import external
from experiments.measure.reading import read
from experiments.common.protocol import Point, Request, Setup
from tests.helpers import BRIEF, ROOT, budget, run, runs, with_store

RUNNER = f"{sys.executable} {ROOT / 'runners' / 'reference_runner.py'}"
TEMPLATE = f"{RUNNER} --model {{model}} --ops {{ops}} --batch-sizes {{batch_sizes}} --name Reference"
REQUEST = Request("external", Setup("fp32", "cpu"), {"name": "mlp_relu"}, 0, budget("quick"),
                  (Point(2, ("inference",)), Point(32, ("inference", "training"))))


@pytest.mark.parametrize("template,name,message", [
    (None, "Lux", "needs external.name=NAME and external.command="),
    ("julia run.jl", None, "needs external.name=NAME"),
    ("julia run.jl --size {n}", "Lux", "has no placeholder {n}: use {model}, {precision}"),
    ("no-such-program-here --model {model}", "Lux", "'no-such-program-here', which is not an executable"),
])
def test_validate_names_the_fix(template, name, message):
    with pytest.raises(ValueError, match=message.replace("{", r"\{").replace("}", r"\}")):
        external.validate(template, name)


def test_the_template_gets_plain_comma_separated_values():
    argv = external.command("prog --m {model} --o {ops} --b {batch_sizes} --p {precision} --d {device}", REQUEST)
    assert argv == ["prog", "--m", "mlp_relu", "--o", "inference,training", "--b", "2,32", "--p", "fp32", "--d", "cpu"]


def lines(*rows: str) -> Parsed:
    return parse("".join(f"{r}\n" for r in rows))


def test_samples_give_the_statistics_and_a_missing_timing_fails_its_point():
    parsed = lines("METADATA\tReference device\tcpu (numpy)", "TIMING\tReference\tmlp_relu\tinference\t2\t0.002",
                   "SAMPLES\tReference\tmlp_relu\tinference\t2\t0.001,0.002,0.003,0.002,0.002,0.002",
                   "TIMING\tReference\tmlp_relu\tinference\t32\t0.004")
    first, second = external.results(parsed, "Reference", "mlp_relu", REQUEST.points, "cpu")
    stats = read(REQUEST.points[0], [first]).ops["inference"].stats  # the parent's statistics of the runner's samples
    assert stats.n_samples == 6 and stats.median_s == 0.002 and stats.min_s == 0.001
    assert first.device == "cpu (numpy)" and first.environment["runner_reference_device"] == "cpu (numpy)"
    assert second.failure == "the runner printed no TIMING line for Reference mlp_relu training 32"


@pytest.mark.parametrize("command,reason", [
    (f"{sys.executable} -c 'import sys; print(\"TIMING\\tReference\\tmlp_relu\\tinference\\t2\"); sys.exit(0)'",
     "the runner printed a malformed line: line 1: TIMING needs 6 tab-separated fields, got 5: "
     "'TIMING\\tReference\\tmlp_relu\\tinference\\t2'"),
    (f"{sys.executable} -c 'import sys; print(\"boom\", file=sys.stderr); sys.exit(3)'", "runner exited with code 3: boom"),
    (f"{sys.executable} -c 'import time; time.sleep(30)'", "timed out: no exit within bench.timeout_s=0.5 s per point"),
])
def test_a_bad_runner_fails_every_point_with_its_reason(tmp_path, command, reason):
    out = external.run(REQUEST, tmp_path, 0.5 if "sleep" in command else 60, external.Runner(command, "Reference"))
    assert [r.failure for r in out] == [reason, reason]
    if "boom" in command:
        assert "boom" in out[0].stderr_tail


@pytest.mark.slow
def test_an_external_runner_joins_the_sweep_beside_jax_and_torch(tmp_path):
    r = run(["-m", "framework=jax,torch,external", "external.name=Reference", f"external.command='{TEMPLATE}'",
             "model=mlp_relu", "batch_size=8,32", "ops=[inference]", *BRIEF], with_store(tmp_path))
    assert r.returncode == 0, r.stderr[-3000:]
    uri = f"sqlite:///{tmp_path}/mlruns/mlflow.db"
    df = runs(uri)
    assert set(df["params.mode"]) == {"jax-jit", "torch-eager", "Reference"} and set(df["status"]) == {"FINISHED"}
    ref = df[df["params.mode"] == "Reference"]
    assert (ref["metrics.inference_n_samples"] > 1).all() and ref["tags.runner_reference_device"].notna().all()
    # the runner times itself: its jobs are measured on their own (unpaired), jax's and torch's paired
    assert set(ref["tags.design"]) == {"unpaired"} and ref["tags.compared_with"].isna().all()
    assert set(ref["tags.parity"]) == {"unchecked"}  # tagged as the paired jobs are
    assert set(df[df["params.mode"] != "Reference"]["tags.design"]) == {"paired"}
    assert len(list(tmp_path.glob("multirun/*/*/[0-9]/points/mlp_relu-Reference-fp32-bs*/record.json"))) == 2
    (parent,) = runs(uri, parents=True)["run_id"]
    client = MlflowClient(uri)
    summary = pd.read_csv(client.download_artifacts(parent, "summary.csv", str(tmp_path)))
    assert set(summary["variant"]) == {"jax-jit fp32", "torch-eager fp32", "Reference fp32"}
    assert "time_mlp_relu_inference.png" in {a.path for a in client.list_artifacts(parent)}
    headline = client.get_run(parent).data.tags["nnbench.headline"]
    assert headline.startswith("jax-jit fp32 vs torch-eager fp32: inference ")
    said = r"([\d.]+× (faster|slower)|as fast)"
    # parity unchecked between the runner and torch: its speedup marked as not shown to compute the same function
    # (its two cells may disagree in direction on a busy machine: `mixed: A to B`, the geometric mean in the brackets)
    assert re.search(f"; Reference fp32 vs torch-eager fp32: inference (mixed: {said} to )?{said} \\(unpaired, 2 "
                     "cells: [^)]+geometric mean[^)]*\\) †$", headline), headline
    assert headline in r.stdout and re.search(r"\| Reference fp32 +\| .* \| \(?[\d.]+×\)? unpaired † +\|", r.stdout)

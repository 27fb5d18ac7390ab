"""The README command end to end, in subprocesses, into real MLflow stores (sqlite, and a local server)."""
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from mlflow.tracking import MlflowClient

from experiments.common.protocol import STATS
from tests.helpers import BRIEF, ROOT, free_port, nnbench, run, runs, serve, user_env, with_store


@pytest.fixture(scope="module")
def readme_sweep(tmp_path_factory):
    """The README sweep with bench=quick, run once in a fresh directory, its parity check on as a user's is:
    (cwd, store uri, completed process)."""
    cwd = tmp_path_factory.mktemp("readme")
    r = run(["-m", "framework=jax,torch", "model=lenet", "bench=quick", "parity=true"], cwd=cwd)
    assert r.returncode == 0, r.stderr[-3000:]
    return cwd, f"sqlite:///{cwd}/mlruns/mlflow.db", r


@pytest.mark.slow
def test_readme_sweep_quick(readme_sweep):
    cwd, uri, _ = readme_sweep
    df = runs(uri)
    assert len(df) == 8 and set(df["status"]) == {"FINISHED"}
    assert set(df["tags.parity"]) == {"ok"} and set(df["tags.flops_source"]) == {"dsl"}
    for fw in ("jax", "torch"):
        sub = df[df["params.framework"] == fw]
        assert sorted(sub["params.batch_size"].astype(int)) == [2, 8, 32, 128]
        assert set(sub["params.device"]) == {"cpu"} and set(sub["params.precision"]) == {"fp32"}
        version = sub[f"tags.{fw}_version"]
        assert version.notna().all() and (version != "").all()
        trained = sub[sub["params.batch_size"].astype(int) >= 32]
        for op, rows in (("inference", sub), ("training", trained)):
            for stat in STATS:
                if stat == "first_call_warm_s":  # bench=quick measures one process: no warm first call
                    assert f"metrics.{op}_{stat}" not in rows or rows[f"metrics.{op}_{stat}"].isna().all()
                else:
                    assert rows[f"metrics.{op}_{stat}"].notna().all(), (fw, op, stat)
            assert (rows[f"metrics.{op}_ci95_low_s"] <= rows[f"metrics.{op}_median_s"]).all()
            assert (rows[f"metrics.{op}_median_s"] <= rows[f"metrics.{op}_ci95_high_s"]).all()
        assert sub[sub["params.batch_size"].astype(int) < 32]["metrics.training_median_s"].isna().all()
    assert set(df["tags.mlflow.runName"]) >= {"lenet · jax-jit · fp32 · bs32", "lenet · torch-eager · fp32 · bs128"}
    for tag in ("python_version", "numpy_version", "cpu_model", "host", "nnbench_git_commit", "env_fingerprint",
                "device_name", "precision_policy", "mlflow.user", "mlflow.source.name", "mlflow.source.git.commit"):
        assert df[f"tags.{tag}"].notna().all(), tag
    for number in ("cpu_count_logical", "memory_total_bytes", "load_avg_1m", "param_count"):  # sortable, chartable
        assert df[f"metrics.{number}"].notna().all() and f"tags.{number}" not in df, number
    assert (df["tags.mlflow.source.name"].str.endswith("experiments/run.py")).all()
    assert (df["tags.mlflow.note.content"].str.contains(r"inference [\d.]+ ms \[[\d.]+, [\d.]+\]")).all()
    assert (df["params.param_count"] == "44426").all()
    client = MlflowClient(uri)
    names = {a.path for a in client.list_artifacts(df["run_id"].iloc[0])}
    assert {"config.yaml", "samples.json", "environment.json", "samples.png"} <= names
    # every result is on disk, in the dir of the job that measured the group: job 0, each job's points apart
    (sweep_dir,) = cwd.glob("multirun/*/*")
    assert len(list(sweep_dir.glob("**/points/*/record.json"))) == 8
    for job, fw in ((0, "jax"), (1, "torch")):
        assert {p.name for p in sweep_dir.glob(f"0/job-{job}/points/*")} == {
            f"lenet-{fw}-{'jit' if fw == 'jax' else 'eager'}-fp32-bs{bs}" for bs in (2, 8, 32, 128)}
    assert not list((sweep_dir / "1").glob("**/points"))  # job 1, a follower, measured nothing
    assert {p.parent.name for p in sweep_dir.glob("0/trials/*/trial-0.json")} == {
        "bs2-inference", "bs8-inference", "bs32-inference", "bs32-training", "bs128-inference", "bs128-training"}
    assert {p.read_text() for p in sweep_dir.glob("**/points/*/mlflow_run_id")} == set(df["run_id"])
    # no secrets: the environment record is an allow-list
    assert not any(c.startswith("tags.") and ("KEY" in c or "TOKEN" in c or "SECRET" in c) for c in df.columns)
    # ...of what changes what is measured: OpenMP's wait policy, as the suite sets it (tests/conftest.py)
    assert set(df["tags.env_OMP_WAIT_POLICY"]) == {os.environ["OMP_WAIT_POLICY"]}


@pytest.mark.slow
def test_readme_sweep_is_paired(readme_sweep):
    """Both frameworks' points come from one group: jax's carry their speedup over torch's (one trial: no interval,
    no verdict), torch's are the baseline; the parent's per-cell metrics are the points' speedups."""
    _, uri, proc = readme_sweep
    df = runs(uri)
    assert set(df["tags.design"]) == {"paired"} and set(df["tags.compared_with"]) == {"torch-eager fp32"}
    jax, torch = (df[df["params.framework"] == fw] for fw in ("jax", "torch"))
    assert set(jax["tags.variant"]) == {"jax-jit fp32"} and set(torch["tags.variant"]) == {"torch-eager fp32"}
    assert set(torch["tags.paired_baseline"]) == {"true"} and jax["tags.paired_baseline"].isna().all()
    assert not [c for c in df if c.endswith(("_speedup", "_verdict")) and torch[c].notna().any()]
    assert (jax["tags.differs"] == "layout nhwc vs contiguous").all()  # parity ok: nothing else but the layout
    (parent,) = runs(uri, parents=True)["run_id"]
    cells = MlflowClient(uri).get_run(parent).data.metrics
    trained = jax[jax["params.batch_size"].astype(int) >= 32]
    for op, rows in (("inference", jax), ("training", trained)):
        assert set(rows[f"tags.{op}_verdict"]) == {"no verdict"}
        assert set(rows[f"metrics.{op}_speedup_trials"]) == {1}
        assert f"metrics.{op}_speedup_ci95_low" not in df or df[f"metrics.{op}_speedup_ci95_low"].isna().all()
        for bs, repro in zip(rows["params.batch_size"], rows[f"tags.{op}_repro"]):  # each its own cell
            assert repro.endswith(f"batch_size={bs} 'ops=[{op}]'") and "framework=jax,torch" in repro, repro
        for bs, speedup in zip(rows["params.batch_size"], rows[f"metrics.{op}_speedup"]):
            cell = f"speedup_{op}_bs{bs}_lenet_jax-jit_fp32_vs_torch-eager_fp32"
            assert cells[cell] == pytest.approx(speedup, rel=1e-3)
        cell_means = [cells[f"speedup_{op}_bs{bs}_lenet_jax-jit_fp32_vs_torch-eager_fp32"]
                      for bs in rows["params.batch_size"]]
        assert cells[SPEEDUP.format(op=op)] == pytest.approx(float(np.exp(np.mean(np.log(cell_means)))), rel=2e-3)
    out = proc.stdout + proc.stderr
    assert "job 1: its points are measured with job 0's, paired" in out
    for bs in (2, 8, 32, 128):  # a line per cell and trial, each variant's median in it
        assert re.search(f"lenet inference bs{bs}, trial 1: jax-jit fp32 [\\d.]+ ms, torch-eager fp32 [\\d.]+ ms", out)
    said = r"[\d.]+× (faster|slower) \(one trial: no interval\)"
    assert re.search(f"lenet · jax-jit · fp32 · bs32: .*; vs torch-eager fp32: inference {said}, training {said}",
                     out)


@pytest.mark.slow
def test_sweep_has_one_parent_with_the_report(readme_sweep):
    cwd, uri, proc = readme_sweep
    (parent,) = runs(uri, parents=True).itertuples()
    children = runs(uri)
    assert (children["tags.mlflow.parentRunId"] == parent.run_id).all()
    p = MlflowClient(uri).get_run(parent.run_id)
    assert p.info.status == "FINISHED" and "framework=jax,torch model=lenet bench=quick" in p.info.run_name
    headline = p.data.tags["nnbench.headline"]
    assert p.info.run_name.startswith("sweep ") and f" · {headline} · framework=jax,torch" in p.info.run_name
    assert p.data.params["job_count"] == "2" and p.data.params["point_count"] == "8"
    # the parent carries the answer: description, metrics, the environment's tags, the UI's columns
    note = p.data.tags["mlflow.note.content"]
    verdict = r"(\d+\.\d\d× (faster|slower)|as fast)"  # one trial: no interval, no verdict
    assert re.fullmatch(f"jax-jit fp32 vs torch-eager fp32: inference {verdict} \\(geometric mean of 4 cells: 4 no "
                        f"verdict\\), training {verdict} \\(geometric mean of 2 cells: 2 no verdict\\)", headline), headline
    assert note.startswith(f"{headline}\n\n| model ")  # a plain line: the runs table shows it raw
    assert "- lenet training: jax-jit fp32 is " in note and "| lenet   | inference |       2 | jax-jit fp32" in note
    assert "Paired: each cell's variants took turns" in note and "- jax-jit fp32: layout nhwc vs contiguous" in note
    assert "Environment: cpu (" in note and "`report.html`" in note
    m = p.data.metrics
    assert m["points_finished"] == 8 and m["points_failed"] == 0 and m["sweep_wall_s"] > 0
    assert {SPEEDUP.format(op="inference"), SPEEDUP.format(op="training")} <= set(m)
    assert not [k for k in m if k.endswith(("_ci95_low", "_ci95_high"))]  # one trial: no interval
    # the runs table's columns: the point counts and the geometric means, not each cell's speedup (the run page's)
    view = json.loads(MlflowClient(uri).get_experiment(parent.experiment_id).tags["mlflow.sharedViewState.nnbench"])
    assert [c for c in view["selectedColumns"] if "speedup" in c] == [
        f"metrics.`{SPEEDUP.format(op=op)}`" for op in ("inference", "training")]
    for op in ("inference", "training"):  # the headline's numbers are the metrics'
        speedup, said = m[SPEEDUP.format(op=op)], re.search(f"{op} ([\\d.]+)× (faster|slower)", headline)
        if said is None:
            assert round(speedup, 2) == 1 and f"{op} as fast" in headline, headline
        else:
            want = speedup if said[2] == "faster" else 1 / speedup
            assert float(said[1]) == pytest.approx(want, rel=1e-3, abs=6e-3), headline
    for tag in ("env_fingerprint", "jax_version", "torch_version", "device_name", "nnbench_git_commit",
                "mlflow.user", "mlflow.source.git.commit"):
        assert p.data.tags[tag], tag
    assert len(p.data.tags["env_fingerprint"].split(", ")) == 2  # one per framework's environment
    assert p.info.user_id == p.data.tags["mlflow.user"] != "unknown"
    assert Path(p.data.params["sweep_dir"]).is_dir()
    arts = {a.path for a in MlflowClient(uri).list_artifacts(parent.run_id)}
    assert {"time_lenet_inference.png", "time_lenet_training.png", "throughput_lenet_inference.png",
            "speedup.png", "summary.csv", "report.md", "report.html"} <= arts
    summary = pd.read_csv(MlflowClient(uri).download_artifacts(parent.run_id, "summary.csv", str(cwd)))
    assert set(summary["run_id"]) == set(children["run_id"])
    # progress: a line per cell and trial with done/total (a measurement per variant), the table, the headline
    # and the runs-table link at the end
    out = proc.stdout + proc.stderr
    assert "[12/12, ETA 0:00]" in out and "[2/12, ETA" in out and "[1/12" not in out
    assert f"\n\n{headline}\n\n8 runs under parent {parent.run_id}" in proc.stdout
    assert re.search(r"\| lenet +\| training +\| +128 \| jax-jit fp32 +\| .* \| \([\d.]+×\) +\|", proc.stdout)
    assert "speedup vs torch-eager fp32" in proc.stdout
    assert f"http://127.0.0.1:5000/#/experiments/{parent.experiment_id}/runs/{parent.run_id}?workflowType=" \
           "machine_learning" in out
    assert "runs?workflowType=machine_learning&viewStateShareKey=nnbench" in out


@pytest.mark.slow
def test_compare_profile_asks_for_profiled_runs(readme_sweep):
    cwd, _, _ = readme_sweep
    r = nnbench("compare", ["model=lenet", "--profile"], cwd)
    assert r.returncode == 2 and "no profiled runs among the 8 selected: measure them with profile=true" in r.stderr


@pytest.mark.slow
def test_compare_report_matches_the_store(readme_sweep, tmp_path):
    cwd, uri, _ = readme_sweep
    r = nnbench("compare", ["model=lenet", "--out", str(tmp_path / "rep")], cwd)
    assert r.returncode == 0, r.stderr
    assert "| lenet" in r.stdout and "torch-eager fp32" in r.stdout
    got = pd.read_csv(tmp_path / "rep" / "summary.csv")
    df = runs(uri).set_index("run_id")
    assert len(got) == 12  # 2 frameworks × (4 inference + 2 training)
    for row in got.itertuples():
        assert row.median_s == df.loc[row.run_id, f"metrics.{row.op}_median_s"]
        assert row.p75_s == df.loc[row.run_id, f"metrics.{row.op}_p75_s"]
    assert {"report.md", "report.html", "speedup.png"} <= {p.name for p in (tmp_path / "rep").iterdir()}


@pytest.mark.slow
@pytest.mark.parametrize("args,message", [
    (["model=nosuchmodel"], "model=nosuchmodel matches no run in experiment 'nnbench'"),
    (["--filter", "params.model ==== 'x'"], "nnbench compare: error:"),
    (["model=lenet", "--experiment", "nope"], "no experiment 'nope'"),
])
def test_compare_fails_clearly(readme_sweep, args, message):
    cwd, _, _ = readme_sweep
    r = nnbench("compare", args, cwd)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0]


@pytest.mark.slow
def test_bad_input_writes_nothing(tmp_path):
    r = run(["-m", "framework=torch", "model=mlp_relu", "batch_size=32,-1", "bench=quick"], cwd=tmp_path)
    assert r.returncode != 0
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("nnbench: error: batch_size must be a positive integer (got -1)")
    assert not (tmp_path / "mlruns" / "mlflow.db").exists()


@pytest.mark.slow
def test_gpu_without_gpu_is_a_clear_error(tmp_path):
    pytest.importorskip("torch")
    import torch
    if torch.cuda.is_available():
        pytest.skip("a GPU is visible")
    r = run(["framework=torch", "model=mlp_relu", "device=gpu", "bench=quick"], cwd=tmp_path)
    assert r.returncode != 0
    assert "sees no GPU" in r.stderr.strip().splitlines()[-1]
    assert not (tmp_path / "mlruns" / "mlflow.db").exists()


@pytest.mark.slow
def test_crashing_variant_is_recorded_and_its_sibling_measured(tmp_path, fake_python):
    """Two environments of one cell, paired: the stand-in's worker crashes as it prepares each cell; its point is
    FAILED with the reason, and the real worker's is measured all the same (in a trial of its own)."""
    r = run(["-m", "framework=torch", "model=mlp_relu", "batch_size=2", "ops=[inference]", "bench=quick",
             f"runtime.python={fake_python},null"], cwd=with_store(tmp_path), FAKE_FAULT="early")
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.strip().splitlines()[-1] == "1 finished, 0 skipped, 1 failed"
    df = runs(f"sqlite:///{tmp_path}/mlruns/mlflow.db")
    assert sorted(df["status"]) == ["FAILED", "FINISHED"] and set(df["tags.design"]) == {"paired"}
    failed, ok = (df[df["status"] == status].iloc[0] for status in ("FAILED", "FINISHED"))
    assert "killed by SIGSEGV" in failed["tags.failure_reason"] and fake_python in failed["tags.variant"]
    assert ok["metrics.inference_median_s"] > 0 and ok["tags.variant"].endswith("runtime.python=None")
    assert "metrics.inference_speedup" not in df or df["metrics.inference_speedup"].isna().all()  # no pair
    (sweep_dir,) = tmp_path.glob("multirun/*/*")
    assert [json.loads(p.read_text())["failure"] is not None for p in
            sorted(sweep_dir.glob("0/trials/bs2-inference/trial-*.json"))] == [True, False]
    assert "[4/4, ETA 0:00]" in r.stdout + r.stderr  # the trial measured again counts in the progress


@pytest.mark.slow
def test_two_trials_give_each_speedup_its_interval_and_verdict(tmp_path, fake_python):
    """bench.processes=2: each cell's ratio from two fresh trials (jax's stand-in twice as fast, each worker off by
    its own ±0.25%), so each point's speedup has an interval and a verdict, and the parent's geometric means too."""
    r = run(["-m", "framework=jax,torch", "model=lenet", "bench=quick", "bench.processes=2", "bench.max_processes=2",
             f"runtime.python={fake_python}"], cwd=with_store(tmp_path), FAKE_FAULT="none", FAKE_SPEEDUP="jax:2")
    assert r.returncode == 0, r.stderr[-3000:]
    uri = f"sqlite:///{tmp_path}/mlruns/mlflow.db"
    df = runs(uri)
    jax = df[df["params.framework"] == "jax"]
    trained = jax[jax["params.batch_size"].astype(int) >= 32]
    for op, rows in (("inference", jax), ("training", trained)):
        assert set(rows[f"tags.{op}_verdict"]) == {"faster"} and set(rows[f"metrics.{op}_speedup_trials"]) == {2}
        low, speedup, high = (rows[f"metrics.{op}_speedup{k}"] for k in ("_ci95_low", "", "_ci95_high"))
        assert ((1.8 < low) & (low < speedup) & (speedup < high) & (high < 2.2)).all()
        assert (rows[f"metrics.{op}_speedup_q_value"] < 0.05).all() and (rows[f"metrics.{op}_mde"] >= 1.03).all()
    (parent,) = runs(uri, parents=True)["run_id"]
    p = MlflowClient(uri).get_run(parent).data
    interval = r"[12]\.\d\d× faster \[[12]\.\d\d, [12]\.\d\d\]"  # 2× faster, as the metrics below say
    assert re.fullmatch(f"jax-jit fp32 vs torch-eager fp32: inference {interval} \\(geometric mean of 4 cells: 4 "
                        f"faster\\) †, training {interval} \\(geometric mean of 2 cells: 2 faster\\) †",
                        p.tags["nnbench.headline"])
    for op in ("inference", "training"):
        low, mean, high = (p.metrics[SPEEDUP.format(op=op) + k] for k in ("_ci95_low", "", "_ci95_high"))
        assert 1.8 < low <= mean <= high < 2.2  # to 4 digits
    assert p.tags["nnbench.headline"] in r.stdout
    assert re.search(r"lenet · jax-jit · fp32 · bs32: .*; vs torch-eager fp32: inference [12](\.\d+)?× faster "
                     r"\[[\d.]+, [\d.]+\], MDE ×[\d.]+, training [12](\.\d+)?× faster \[[\d.]+, [\d.]+\], "
                     r"MDE ×[\d.]+(;|$)", r.stdout, re.M)
    assert "[24/24, ETA 0:00]" in r.stdout + r.stderr and "trial 2: jax-jit fp32 " in r.stdout


@pytest.mark.slow
def test_unpaired_sweep_measures_each_job_on_its_own(tmp_path, fake_python):
    """bench.paired=false, the engine before pairing: each job measures its own points in bench.processes workers one
    after another, in its own dir, and the answer marks its speedups unpaired."""
    r = run(["-m", "framework=jax,torch", "model=mlp_relu", "batch_size=8", "ops=[inference]", "bench=quick",
             "bench.processes=2", "bench.paired=false", f"runtime.python={fake_python}"], cwd=with_store(tmp_path),
            FAKE_FAULT="none", FAKE_MEDIAN_PER_BATCH="1")
    assert r.returncode == 0, r.stderr[-3000:]
    for mode in ("jax-jit", "torch-eager"):  # a line per worker, the point's numbers once its last one is done
        assert f"mlp_relu · {mode} · fp32 · bs8: process 1 of 2 measured" in r.stdout
        assert f"mlp_relu · {mode} · fp32 · bs8: inference 0.800 ms [0.800, 0.800]" in r.stdout
    assert "[4/4, ETA 0:00]" in r.stdout and "trial 1" not in r.stdout and "measured with job 0's" not in r.stdout
    (sweep_dir,) = tmp_path.glob("multirun/*/*")
    assert sorted(p.parents[2].name for p in sweep_dir.glob("*/points/*/record.json")) == ["0", "1"]
    assert not list(sweep_dir.glob("*/trials")) and not list(sweep_dir.glob("*/job-*"))
    uri = f"sqlite:///{tmp_path}/mlruns/mlflow.db"
    df = runs(uri)
    assert set(df["tags.design"]) == {"unpaired"} and "tags.compared_with" not in df
    assert set(df["tags.parity"]) == {"unchecked"} and set(df["tags.flops_source"]) == {"dsl"}  # as a paired job's
    assert set(df["metrics.inference_median_s"]) == {8e-4} and "metrics.inference_speedup" not in df
    headline = MlflowClient(uri).get_run(runs(uri, parents=True)["run_id"].iloc[0]).data.tags["nnbench.headline"]
    assert headline == ("jax-jit fp32 vs torch-eager fp32: inference as fast (unpaired, 1 cell: 1 within the noise, "
                        "geometric mean) †")


@pytest.mark.slow
def test_tracking_server_via_environment(tmp_path):
    port = free_port()
    server = serve(f"sqlite:///{with_store(tmp_path, 'server.db')}/server.db", port, tmp_path / "art")
    uri = f"http://127.0.0.1:{port}"
    try:
        r = run(["framework=torch", "model=mlp_relu", "batch_size=4", *BRIEF], cwd=tmp_path,
                MLFLOW_TRACKING_URI=uri)
        assert r.returncode == 0, r.stderr[-3000:]
        df = runs(uri)
        assert len(df) == 1 and df["status"].iloc[0] == "FINISHED"
        assert {a.path for a in MlflowClient(uri).list_artifacts(df["run_id"].iloc[0])} >= {"samples.json"}
        assert not (tmp_path / "mlruns" / "mlflow.db").exists()  # nothing went to the default store
    finally:
        os.killpg(server.pid, 15)
        server.wait(timeout=30)


CHROMIUM = "/usr/bin/chromium"
SPEEDUP = "speedup_{op}_jax-jit_fp32_vs_torch-eager_fp32"  # the README sweep's geometric means on its parent run


@pytest.mark.slow
def test_an_op_the_model_lacks_is_a_finished_run_marked_skipped(tmp_path):
    """matmul_chain has constant weights, so no training step: FINISHED with outcome=skipped, not KILLED; the sweep's
    parent counts it skipped, not finished, and the sweep, which measured nothing, exits 1."""
    r = run(["-m", "framework=torch", "model=matmul_chain", "model.n=64", "batch_size=4", "ops=[training]",
             "bench=quick"], cwd=with_store(tmp_path))
    assert r.returncode == 1 and "nnbench: error: no point was measured" in r.stderr, r.stderr[-3000:]
    df = runs(f"sqlite:///{tmp_path}/mlruns/mlflow.db")
    assert df["status"].tolist() == ["FINISHED"] and df["tags.outcome"].tolist() == ["skipped"] and "constant weights" in df["tags.skip_reason_training"][0]
    assert r.stdout.strip().splitlines()[-1] == "0 finished, 1 skipped, 0 failed"
    (parent,) = runs(f"sqlite:///{tmp_path}/mlruns/mlflow.db", parents=True).to_dict("records")
    assert (parent["metrics.points_finished"], parent["metrics.points_skipped"]) == (0, 1)


def text_after(page, label: str) -> str:
    """A run page's "Created by"/"Source" value: the label's parent's text, less the label."""
    return page.get_by_text(label, exact=True).first.locator("xpath=..").inner_text().replace(label, "").strip()


@pytest.mark.slow
@pytest.mark.browser
def test_mlflow_ui_shows_the_answer(readme_sweep, tmp_path):
    """`nnbench ui` on the README sweep's store, in headless Chromium at 1600×1000: the parent page shows the
    headline on its first screen (title and description), the rendered summary table, who made it and from where,
    and the speedup metrics; the runs table's collapsed parent row shows the headline, the point counts and the
    speedups on the first screen; the parent's plot renders. Screenshots in tmp_path and test-artifacts/."""
    playwright = pytest.importorskip("playwright.sync_api")
    if not Path(CHROMIUM).exists():
        pytest.skip("Debian's chromium is not installed (apt-get install chromium)")
    cwd, uri, _ = readme_sweep
    (parent,) = runs(uri, parents=True).itertuples()
    user = runs(uri, parents=True)["tags.mlflow.user"].iloc[0]
    answer = MlflowClient(uri).get_run(parent.run_id).data
    headline = answer.tags["nnbench.headline"]
    port = free_port()
    ui = subprocess.Popen([sys.executable, "-m", "experiments", "ui", "--port", str(port)], cwd=cwd, env=user_env(),
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    kept = ROOT / "test-artifacts"
    kept.mkdir(exist_ok=True)

    def shot(page, name: str, **kw) -> None:
        page.screenshot(path=str(tmp_path / name), **kw)
        shutil.copy2(tmp_path / name, kept / name)

    try:
        printed = [ui.stdout.readline() for _ in range(3)]  # starting ..., runs table, latest sweep
        assert printed[0].startswith("starting the MLflow UI"), printed
        table_link, parent_link = (line.rsplit(" ", 1)[1].strip() for line in printed[1:])  # "...: <link>"
        assert parent_link == f"http://127.0.0.1:{port}/#/experiments/{parent.experiment_id}/runs/{parent.run_id}" \
                              "?workflowType=machine_learning"
        with playwright.sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=[
                "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                "--disable-component-update", "--disable-sync"])
            context = browser.new_context(viewport={"width": 1600, "height": 1000})
            # the "MLflow Assistant" panel opens on an origin's first visit; a user closes it once
            context.add_init_script("localStorage.setItem('mlflow.assistant.fab.autoOpenedOnFirstLoad_v1', 'true')")
            page = context.new_page()
            page.goto(parent_link)
            header = page.locator("th").filter(has_text="95% re-run interval").first
            header.wait_for(timeout=90_000)
            assert "Runs" in page.locator(".du-bois-light-breadcrumb").first.inner_text()  # Model training view
            # the table's top is on the first screen and not clipped by the collapsed description: the header row
            # lies inside its nearest clipping box (MLflow shows about 100 px of a description until "Show more")
            assert header.evaluate("""el => { const r = el.getBoundingClientRect(); let box = el.parentElement;
                while (box && getComputedStyle(box).overflowY === 'visible') box = box.parentElement;
                const c = box ? box.getBoundingClientRect() : {top: 0, bottom: window.innerHeight};
                return r.top >= c.top && r.bottom <= c.bottom && r.bottom < window.innerHeight; }""")
            assert text_after(page, "Created by") == user
            assert "run.py" in text_after(page, "Source")
            page.get_by_text(SPEEDUP.format(op="inference")).first.wait_for(timeout=30_000)
            # the headline on the first screen, unscrolled: in the title (the run's name) and as the description's
            # first line
            title, line = page.locator("h2").filter(has_text=headline), page.get_by_text(headline, exact=True)
            for where in (title, line):
                box = where.first.bounding_box()
                assert box and 0 <= box["y"] and box["y"] + box["height"] <= 1000, (headline, box)
            assert page.evaluate("window.scrollY") == 0
            shot(page, "mlflow-ui-parent.png")
            # opened 1024 px wide, the page stacks "About this run" (child links, tags) above the description, which
            # starts about 1100 px down: the title still leads with the headline
            page.set_viewport_size({"width": 1024, "height": 768})
            page.reload()
            title.first.wait_for(timeout=60_000)
            page.get_by_text("About this run").first.wait_for(timeout=30_000)
            box = title.first.bounding_box()
            assert box and box["y"] + box["height"] <= 768, box
            shot(page, "mlflow-ui-parent-1024.png")
            page.set_viewport_size({"width": 1600, "height": 1000})
            page.get_by_role("button", name="Expand description").click()
            shot(page, "mlflow-ui-parent-expanded.png", full_page=True)
            page.goto(table_link)
            row = page.locator(f'[row-id="{parent.run_id}"]').first
            row.wait_for(timeout=60_000)
            # the collapsed parent row answers on the first screen: the headline's first 50 characters (all MLflow
            # shows of a description), the point counts and the geometric means, each cell inside the window
            cells = {c: page.locator(f'[row-id="{parent.run_id}"] [col-id="{c}"]').first for c in (
                "attributes.`Description`", "metrics.`points_finished`", "metrics.`points_skipped`",
                "metrics.`points_failed`", *(f"metrics.`{SPEEDUP.format(op=op)}`" for op in ("inference", "training")))}
            for c, cell in cells.items():
                assert cell.evaluate("el => { const r = el.getBoundingClientRect(); return r.left >= 0 && "
                                     "r.right <= window.innerWidth && r.bottom <= window.innerHeight; }"), c
            assert cells["attributes.`Description`"].inner_text().startswith(headline[:50])
            for c, cell in list(cells.items())[1:]:
                want = answer.metrics[c.removeprefix("metrics.`").removesuffix("`")]
                assert float(cell.inner_text()) == pytest.approx(want, rel=1e-3), c
            shot(page, "mlflow-ui-runs.png")
            row.locator("button").first.click()  # expand the children
            for name in ("lenet · jax-jit · fp32 · bs32", "lenet · torch-eager · fp32 · bs128"):
                page.get_by_role("link", name=name).wait_for(timeout=30_000)
            shot(page, "mlflow-ui-runs-expanded.png")
            page.goto(f"{parent_link.split('?')[0]}/artifacts/time_lenet_inference.png?workflowType=machine_learning")
            img = page.locator("img[src^='blob:']").first
            img.wait_for(timeout=60_000)
            page.wait_for_function("el => el.complete && el.naturalWidth > 0", arg=img.element_handle(),
                                   timeout=30_000)
            assert img.evaluate("el => el.naturalWidth") == 800  # the figure as plots.plot_lines saves it
            shot(page, "mlflow-ui-parent-plot.png")
            browser.close()
    finally:
        os.killpg(ui.pid, signal.SIGINT)
        assert ui.wait(timeout=60) == 130  # Ctrl-C stops the UI as every command: one line, exit 130
    assert not ui_children_left(port)


def ui_children_left(port: int) -> bool:
    """Whether anything still answers on the UI's port after `nnbench ui` ended."""
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.mark.slow
def test_parent_structure_holds_with_joblib(tmp_path, fake_python):
    """Jobs in other processes (loky workers) find the sweep's parent through the sweep dir, whose unique suffix is
    drawn once in the launching process and reaches every job through Hydra's resolver cache (test_cluster.py: the
    same with submitit's processes)."""
    pytest.importorskip("hydra_plugins.hydra_joblib_launcher")
    r = run(["-m", "hydra/launcher=joblib", "hydra.launcher.n_jobs=1", "framework=jax,torch", "model=mlp_relu",
             "batch_size=8", "ops=[inference]", "bench=quick", f"runtime.python={fake_python}"],
            cwd=with_store(tmp_path), FAKE_FAULT="none")
    assert r.returncode == 0, r.stderr[-3000:]
    assert "Joblib.Parallel" in r.stdout + r.stderr
    (sweep_dir,) = tmp_path.glob("multirun/*/*")
    assert sorted(p.name for p in sweep_dir.iterdir() if p.name.isdigit()) == ["0", "1"]
    # job 0's process rebuilt its sibling from the sweep's state and measured both, paired; job 1's measured nothing
    assert len(list(sweep_dir.glob("0/job-*/points/*/record.json"))) == 2 and not list(sweep_dir.glob("1/**/points"))
    uri = f"sqlite:///{tmp_path}/mlruns/mlflow.db"
    (parent,) = runs(uri, parents=True).itertuples()
    children = runs(uri)
    assert len(children) == 2 and (children["tags.mlflow.parentRunId"] == parent.run_id).all()
    assert set(children["tags.design"]) == {"paired"} and children["metrics.inference_speedup"].notna().sum() == 1
    assert {a.path for a in MlflowClient(uri).list_artifacts(parent.run_id)} >= {"time_mlp_relu_inference.png"}
    assert r.stdout.strip().splitlines()[-1] == "2 finished, 0 skipped, 0 failed"


@pytest.mark.slow
def test_unreachable_tracking_server_is_a_clear_error(tmp_path):
    t0 = time.monotonic()
    r = run(["-m", "framework=torch", "model=mlp_relu", "batch_size=2", "bench=quick"], cwd=tmp_path,
            MLFLOW_TRACKING_URI=f"http://127.0.0.1:{free_port()}")
    assert r.returncode != 0 and time.monotonic() - t0 < 60
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("nnbench: error: cannot open the MLflow store at http://127.0.0.1:")
    assert "start the tracking server" in last
    assert not list(tmp_path.glob("multirun/*/*/*/points"))  # nothing was measured


@pytest.mark.slow
def test_store_lost_mid_sweep_keeps_every_point_for_upload(tmp_path, fake_python):
    """The store breaks after the sweep opened it: the jobs measure on, say how to recover, and upload logs all."""
    store = tmp_path / "mlruns" / "mlflow.db"
    r = run(["-m", "framework=torch", "model=mlp_relu", "batch_size=2,8", "bench=quick", f"runtime.python={fake_python}"],
            cwd=with_store(tmp_path), FAKE_FAULT="none", FAKE_BREAK_STORE=str(store))
    out = r.stdout + r.stderr
    assert out.count("could not log") == 2 and "nnbench upload" in out
    assert r.returncode == 1 and "could not finish the sweep's report" in r.stderr.strip().splitlines()[-1]
    saved = list(tmp_path.glob("multirun/**/points/*/record.json"))
    assert len(saved) == 2 and not list(tmp_path.glob("multirun/**/points/*/mlflow_run_id"))
    uri = f"sqlite:///{with_store(tmp_path, 'elsewhere.db')}/elsewhere.db"
    up = nnbench("upload", [str(tmp_path / "multirun"), "--uri", uri], tmp_path)
    assert up.returncode == 0, up.stderr
    df = runs(uri)
    assert sorted(df["params.batch_size"]) == ["2", "8"] and set(df["status"]) == {"FINISHED"}
    assert set(df["metrics.inference_median_s"]) == {0.001}

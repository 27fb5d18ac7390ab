"""The README command end to end, in subprocesses, into real MLflow stores (sqlite, and a local server)."""
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import mlflow
import pandas as pd
import pytest
from mlflow.tracking import MlflowClient

from tests.test_isolation import FAKE

ROOT = Path(__file__).resolve().parent.parent
STATS = ["median_s", "p25_s", "p75_s", "ci95_low_s", "ci95_high_s", "min_s", "mean_s", "std_s", "n_samples",
         "first_call_s", "throughput_samples_per_s"]


def run(args, cwd, **extra_env):
    """`python -m experiments.run ARGS` as a user runs it in `cwd` (so ./mlruns is the default store)."""
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    env.update(PYTHONPATH=str(ROOT), **extra_env)
    return subprocess.run([sys.executable, "-m", "experiments.run", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600)


def runs(uri, parents=False):
    """The point runs (or only the sweeps' parent runs) of the nnbench experiment."""
    mlflow.set_tracking_uri(uri)
    df = mlflow.search_runs(experiment_names=["nnbench"])
    is_parent = df.get("tags.nnbench.sweep", pd.Series("", index=df.index)).eq("true")
    return df[is_parent] if parents else df[~is_parent]


@pytest.mark.slow
def test_readme_sweep_quick(tmp_path):
    r = run(["-m", "framework=jax,torch", "model=lenet", "bench=quick"], cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    uri = f"sqlite:///{tmp_path}/mlruns/mlflow.db"
    df = runs(uri)
    assert len(df) == 8 and set(df["status"]) == {"FINISHED"}
    for fw in ("jax", "torch"):
        sub = df[df["params.framework"] == fw]
        assert sorted(sub["params.batch_size"].astype(int)) == [2, 8, 32, 128]
        assert set(sub["params.device"]) == {"cpu"} and set(sub["params.precision"]) == {"fp32"}
        version = sub[f"tags.{fw}_version"]
        assert version.notna().all() and (version != "").all()
        trained = sub[sub["params.batch_size"].astype(int) >= 32]
        for op, rows in (("inference", sub), ("training", trained)):
            for stat in STATS:
                assert rows[f"metrics.{op}_{stat}"].notna().all(), (fw, op, stat)
            assert (rows[f"metrics.{op}_ci95_low_s"] <= rows[f"metrics.{op}_median_s"]).all()
            assert (rows[f"metrics.{op}_median_s"] <= rows[f"metrics.{op}_ci95_high_s"]).all()
        assert sub[sub["params.batch_size"].astype(int) < 32]["metrics.training_median_s"].isna().all()
    assert set(df["tags.mlflow.runName"]) >= {"lenet · jax-jit · fp32 · bs32", "lenet · torch-eager · fp32 · bs128"}
    for tag in ("python_version", "numpy_version", "cpu_model", "cpu_count_logical", "host",
                "nnbench_git_commit", "env_fingerprint", "device_name", "precision_policy"):
        assert df[f"tags.{tag}"].notna().all(), tag
    assert (df["params.param_count"] == "44426").all()
    client = MlflowClient(uri)
    names = {a.path for a in client.list_artifacts(df["run_id"].iloc[0])}
    assert {"config.yaml", "samples.json", "environment.json"} <= names
    # every result is on disk in the Hydra job dirs too
    assert len(list(tmp_path.glob("multirun/*/*/*/points/*/record.json"))) == 8
    # no secrets: the environment record is an allow-list
    assert not any(c.startswith("tags.") and ("KEY" in c or "TOKEN" in c or "SECRET" in c) for c in df.columns)


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
def test_crashing_job_is_recorded_and_the_sweep_goes_on(tmp_path):
    fake = tmp_path / "fake-python"
    fake.write_text(FAKE.format(python=sys.executable))
    fake.chmod(0o755)
    r = run(["-m", "framework=torch", "model=mlp_relu", "batch_size=2", "bench=quick",
             f"runtime.python={fake},null"], cwd=tmp_path, FAKE_FAULT="early")
    assert r.returncode == 0, r.stderr[-3000:]
    df = runs(f"sqlite:///{tmp_path}/mlruns/mlflow.db")
    assert sorted(df["status"]) == ["FAILED", "FINISHED"]
    failed = df[df["status"] == "FAILED"].iloc[0]
    assert failed["tags.failure_reason"].startswith("child killed by SIGSEGV")


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_tracking_server_via_environment(tmp_path):
    port = _free_port()
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false", "MLFLOW_DISABLE_TELEMETRY": "true"}
    server = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
         "--backend-store-uri", f"sqlite:///{tmp_path}/server.db", "--artifacts-destination", str(tmp_path / "art")],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    uri = f"http://127.0.0.1:{port}"
    try:
        for _ in range(120):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                time.sleep(0.5)
        r = run(["framework=torch", "model=mlp_relu", "batch_size=4", "bench=quick"], cwd=tmp_path,
                MLFLOW_TRACKING_URI=uri)
        assert r.returncode == 0, r.stderr[-3000:]
        df = runs(uri)
        assert len(df) == 1 and df["status"].iloc[0] == "FINISHED"
        assert {a.path for a in MlflowClient(uri).list_artifacts(df["run_id"].iloc[0])} >= {"samples.json"}
        assert not (tmp_path / "mlruns" / "mlflow.db").exists()  # nothing went to the default store
    finally:
        os.killpg(server.pid, 15)
        server.wait(timeout=30)

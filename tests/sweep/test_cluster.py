"""Sweeps on a real single-node SLURM cluster (through Hydra's submitit launcher) and into a shared MLflow
tracking server on PostgreSQL, both brought up by the scripts in tests/cluster/ (as .ci/run does, as root).

Where they can't run (not root, no Debian packages) these tests skip, unless NNBENCH_REQUIRE_CLUSTER=1 (CI sets
it), which makes a missing cluster a failure rather than a skip.
"""
import configparser
import contextlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from experiments.common.config import README_SWEEP as SWEEP
from tests.helpers import BRIEF, ROOT, run, runs, unavailable, with_store

CLUSTER = ROOT / "tests" / "cluster"
# The README's sweep (both frameworks, LeNet), one point a job at the least budget: the tests compare runs and jobs,
# not numbers (test_sweep.py runs the whole README sweep)
README_SWEEP = [*SWEEP, "ops=[inference]", "batch_size=2", *BRIEF]
POINT = ["params.framework", "params.mode", "params.model", "params.precision", "params.batch_size",
         "params.device", "status"]

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def server():
    """A real `mlflow server` on PostgreSQL on 127.0.0.1, from tests/cluster/tracking.sh, in a state dir of its own
    (under /tmp: the postgres user must reach it, and pytest's own temporary dirs are root's alone)."""
    state = tempfile.mkdtemp(prefix="nnbench-tracking-")
    env = {**os.environ, "PYTHON": sys.executable, "NNBENCH_TRACKING_DIR": str(state)}
    r = subprocess.run(["bash", str(CLUSTER / "tracking.sh"), "up"], env=env, capture_output=True, text=True,
                       timeout=300)
    if r.returncode:
        unavailable("PostgreSQL tracking server", f"tracking.sh up failed: {r.stderr.strip().splitlines()[-1:]}")
    uri = r.stdout.strip().splitlines()[-1]
    assert uri.startswith("http://127.0.0.1:")
    yield uri
    subprocess.run(["bash", str(CLUSTER / "tracking.sh"), "down"], env=env, capture_output=True, timeout=120)
    shutil.rmtree(state, ignore_errors=True)


def readme_points(df) -> bool:
    """The README sweep's two points, as a local sweep logs them (test_sweep.py runs it with the basic launcher)."""
    return sorted(map(tuple, df[POINT].astype(str).values)) == [
        ("jax", "jax-jit", "lenet", "fp32", "2", "cpu", "FINISHED"),
        ("torch", "torch-eager", "lenet", "fp32", "2", "cpu", "FINISHED")]


def measured_by_the_leader(cwd: Path) -> None:
    """The cell's variants were measured by job 0 (the group's leader), each job's point in its own dir there; job 1
    (a follower) measured nothing and said so."""
    (sweep,) = cwd.glob("multirun/*/*")
    assert sorted(p.parents[2].name for p in sweep.glob("*/job-*/points/*/record.json")) == ["job-0", "job-1"]
    assert {p.parents[3].name for p in sweep.glob("*/job-*/points/*/record.json")} == {"0"}
    assert not list(sweep.glob("1/**/points")) and not list(sweep.glob("1/trials"))


def test_readme_sweep_through_slurm(slurm, tmp_path):
    """Each cell's variants are measured in one SLURM job on one node: the group's leader, job 0, runs both
    frameworks' workers; the follower, job 1, goes through sbatch too and measures nothing."""
    r = run(["-m", "hydra/launcher=slurm", *README_SWEEP], with_store(tmp_path))
    assert r.returncode == 0, r.stderr[-3000:]
    uri = f"sqlite:///{tmp_path}/mlruns/mlflow.db"
    df, (parent,) = runs(uri), runs(uri, parents=True).itertuples()
    assert readme_points(df)  # the same runs as a local sweep
    assert set(df["tags.design"]) == {"paired"} and df["metrics.inference_speedup"].notna().sum() == 1
    # both points from the leader's job, on one node: its job id and array task, in each worker's environment
    assert df["tags.slurm_job_id"].notna().all() and df["tags.slurm_job_id"].nunique() == 1
    assert set(df["tags.slurm_array_task_id"]) == {"0"} and df["tags.slurm_node"].nunique() == 1
    measured_by_the_leader(tmp_path)
    (sweep,) = tmp_path.glob("multirun/*/*")
    follower = "".join(p.read_text() for p in sweep.glob(".submitit/*_1/*_log.out"))
    assert "job 1: its points are measured with job 0's, paired" in follower
    assert (df["tags.mlflow.parentRunId"] == parent.run_id).all() and parent.status == "FINISHED"
    array = {p.name.split("_")[0] for p in sweep.glob(".submitit/*") if re.fullmatch(r"\d+_\d+", p.name)}
    accounted = subprocess.run(["sacct", "-n", "-X", "-P", "-o", "JobID,State", "-j", ",".join(array)],
                               capture_output=True, text=True).stdout.split()
    assert len(accounted) == 2 and all(a.endswith("|COMPLETED") for a in accounted)  # both went through sbatch


def test_readme_sweep_with_submitit_local(tmp_path):
    """Jobs in submitit's processes find the sweep's parent through the sweep dir (its unique suffix drawn once in
    the launching process, reaching every job through Hydra's resolver cache): the leader rebuilds its sibling from
    the sweep's state and measures both, paired, under that parent (test_sweep.py: the same with joblib)."""
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    r = run(["-m", "hydra/launcher=submitit_local", "hydra.sweeper.max_batch_size=1", *README_SWEEP],
            with_store(tmp_path))
    assert r.returncode == 0, r.stderr[-3000:]
    uri = f"sqlite:///{tmp_path}/mlruns/mlflow.db"
    df, (parent,) = runs(uri), runs(uri, parents=True).itertuples()
    assert readme_points(df) and parent.status == "FINISHED"
    assert (df["tags.mlflow.parentRunId"] == parent.run_id).all()
    assert set(df["tags.design"]) == {"paired"} and df["metrics.inference_speedup"].notna().sum() == 1
    assert {a.path for a in MlflowClient(uri).list_artifacts(parent.run_id)} >= {"time_lenet_inference.png"}
    assert r.stdout.strip().splitlines()[-1] == "2 finished, 0 skipped, 0 failed"
    measured_by_the_leader(tmp_path)  # in its own process, from the sweep's state


def test_sweep_into_the_shared_server(server, tmp_path):
    r = run(["-m", *README_SWEEP], tmp_path, MLFLOW_TRACKING_URI=server)
    assert r.returncode == 0, r.stderr[-3000:]
    parent = r.stdout.split("runs under parent ")[1].split()[0]
    df = runs(server)
    mine = df[df["tags.mlflow.parentRunId"] == parent]
    assert readme_points(mine)
    link = [line for line in r.stdout.splitlines() if line.startswith("runs table")][-1]
    assert f"{server}/#/experiments/" in link and "runs?workflowType=machine_learning" in link  # the server's own
    assert not (tmp_path / "mlruns" / "mlflow.db").exists()


def test_two_sweeps_at_once_into_the_server(server, tmp_path):
    """4 jobs in two concurrent sweeps (joblib launcher), one server: every run there, none left RUNNING."""
    pytest.importorskip("hydra_plugins.hydra_joblib_launcher")
    results = {}

    def sweep(name, fw):
        (tmp_path / name).mkdir()
        results[name] = run(["-m", "hydra/launcher=joblib", "hydra.launcher.n_jobs=1", f"framework={fw}",
                             "model=mlp_relu", "batch_size=8,32", "ops=[inference]", *BRIEF], tmp_path / name,
                            MLFLOW_TRACKING_URI=server)

    threads = [threading.Thread(target=sweep, args=(n, fw)) for n, fw in (("a", "jax"), ("b", "torch"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    parents = {}
    for name, r in results.items():
        assert r.returncode == 0, r.stderr[-3000:]
        parents[name] = r.stdout.split("runs under parent ")[1].split()[0]
    df = runs(server)
    for name, fw in (("a", "jax"), ("b", "torch")):
        mine = df[df["tags.mlflow.parentRunId"] == parents[name]]
        assert len(mine) == 2 and set(mine["params.framework"]) == {fw} and set(mine["status"]) == {"FINISHED"}
    every = runs(server, parents=True)
    assert "RUNNING" not in set(df["status"]) | set(every["status"])


@pytest.fixture(scope="module")
def auth_server():
    """tracking.sh's server with MLflow's basic-auth app, and one user from `add-user`: (uri, credentials file)."""
    state = tempfile.mkdtemp(prefix="nnbench-tracking-")
    env = {**os.environ, "PYTHON": sys.executable, "NNBENCH_TRACKING_DIR": state, "NNBENCH_TRACKING_AUTH": "1"}
    script = ["bash", str(CLUSTER / "tracking.sh")]
    r = subprocess.run([*script, "up"], env=env, capture_output=True, text=True, timeout=300)
    if r.returncode:
        unavailable("PostgreSQL tracking server", f"tracking.sh up failed: {r.stderr.strip().splitlines()[-1:]}")
    user = subprocess.run([*script, "add-user", "alice"], env=env, capture_output=True, text=True, timeout=120)
    assert user.returncode == 0, user.stderr
    yield r.stdout.strip().splitlines()[-1], Path(user.stdout.strip().splitlines()[-1])
    subprocess.run([*script, "down"], env=env, capture_output=True, timeout=120)
    shutil.rmtree(state, ignore_errors=True)


@contextlib.contextmanager
def as_user(creds: dict[str, str]):
    """This process reads the store as that user (MLflow takes the credentials from the environment per request).
    The URI is passed to the client: an earlier test's `mlflow.set_tracking_uri` in this process outranks the
    environment."""
    os.environ.update(creds)
    try:
        from mlflow.tracking import MlflowClient

        client = MlflowClient(tracking_uri=creds["MLFLOW_TRACKING_URI"])
        yield client, client.get_experiment_by_name("nnbench")
    finally:
        for k in creds:
            os.environ.pop(k)


def everything_logged(uri: str, tmp: Path, creds: dict[str, str]) -> bytes:
    """Every param, tag, metric name and artifact of every run of the experiment, as the server gives them."""
    with as_user(creds | {"MLFLOW_TRACKING_URI": uri}) as (client, exp):
        out = [repr(exp.tags).encode()]
        for r in client.search_runs([exp.experiment_id], max_results=1000):
            out += [repr(r.data.params).encode(), repr(r.data.tags).encode(), repr(sorted(r.data.metrics)).encode()]
            where = client.download_artifacts(r.info.run_id, "", str(tmp / r.info.run_id))
            out += [p.read_bytes() for p in Path(where).rglob("*") if p.is_file()]
        return b"\n".join(out)


def statuses(uri: str, creds: dict[str, str], parents: set[str]) -> dict[str, int]:
    """The statuses of these sweeps' runs, parents and points (the module's other tests write to servers too)."""
    with as_user(creds | {"MLFLOW_TRACKING_URI": uri}) as (client, exp):
        return dict(Counter(r.info.status for r in client.search_runs([exp.experiment_id], max_results=1000)
                            if r.info.run_id in parents or r.data.tags.get("mlflow.parentRunId") in parents))


def parent_of(r: subprocess.CompletedProcess) -> str:
    return r.stdout.split("runs under parent ")[1].split()[0]


def test_a_sweep_into_an_authenticated_server_keeps_the_password_out(auth_server, tmp_path, fake_python):
    """With the user's password from the environment (a real worker), then from ~/.mlflow/credentials (the fake
    worker): every point logged; the password in no param, tag, metric name, artifact, sweep dir or console line.
    A wrong password: one line naming the fix, and nothing written."""
    uri, credentials = auth_server
    config = configparser.ConfigParser()
    config.read(credentials)
    user, password = config["mlflow"]["mlflow_tracking_username"], config["mlflow"]["mlflow_tracking_password"]
    creds = {"MLFLOW_TRACKING_USERNAME": user, "MLFLOW_TRACKING_PASSWORD": password}
    point = ["-m", "framework=torch", "model=mlp_relu", "ops=[inference]", "bench=quick"]
    (tmp_path / "env").mkdir()
    r = run([*point, *BRIEF[1:], "batch_size=8"], tmp_path / "env", MLFLOW_TRACKING_URI=uri, **creds)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.strip().splitlines()[-1] == "1 finished, 0 skipped, 0 failed"
    home = tmp_path / "home"
    (home / ".mlflow").mkdir(parents=True)
    shutil.copy(credentials, home / ".mlflow" / "credentials")
    (tmp_path / "file").mkdir()
    f = run([*point, "batch_size=2,4", f"runtime.python={fake_python}"], tmp_path / "file", MLFLOW_TRACKING_URI=uri,
            HOME=str(home), FAKE_FAULT="none")
    assert f.returncode == 0, f.stderr[-3000:]
    assert f.stdout.strip().splitlines()[-1] == "2 finished, 0 skipped, 0 failed"

    logged = everything_logged(uri, tmp_path / "artifacts", creds)
    assert b"mlp_relu" in logged and b"samples_s" in logged  # what was searched is there
    parents = {parent_of(r), parent_of(f)}
    assert statuses(uri, creds, parents) == {"FINISHED": 5}  # two parents, three points
    on_disk = b"".join(p.read_bytes() for d in ("env", "file") for p in (tmp_path / d).rglob("*") if p.is_file())
    for where in (logged, on_disk, (r.stdout + r.stderr + f.stdout + f.stderr).encode()):
        assert password.encode() not in where

    started = int(time.time() * 1000)
    (tmp_path / "wrong").mkdir()
    w = run([*point, "batch_size=8"], tmp_path / "wrong", MLFLOW_TRACKING_URI=uri, MLFLOW_TRACKING_USERNAME=user,
            MLFLOW_TRACKING_PASSWORD="not-" + password)
    assert w.returncode == 2
    assert w.stderr.strip().splitlines() == [f"nnbench: error: the MLflow server at {uri} refuses user 'alice' and its "
                                             "password (HTTP 401): set MLFLOW_TRACKING_USERNAME and "
                                             "MLFLOW_TRACKING_PASSWORD, or ~/.mlflow/credentials, to a user of that "
                                             "server"]
    assert password not in w.stdout + w.stderr
    assert not list((tmp_path / "wrong").iterdir())  # nothing written here
    with as_user(creds | {"MLFLOW_TRACKING_URI": uri}) as (client, exp):
        assert not client.search_runs([exp.experiment_id], f"attributes.start_time > {started}")  # nor there

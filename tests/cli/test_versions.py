"""Framework upgrades: a second real environment, versions from the worker, and verdicts across versions."""
import subprocess
import sys

import pandas as pd
import pytest

from experiments.common.job import Job
from experiments.store import records, tracking
from experiments.common.protocol import Point, PointResult
from tests.helpers import ROOT, nnbench, ok_op, run, runs

OLD_JAX = "0.10.1"


@pytest.fixture(scope="module")
def two_jax_sweep(tmp_path_factory):
    """The same LeNet point measured under this jax and under jax 0.10.1 in a venv made by nnbench venv."""
    import jax

    if jax.__version__ == OLD_JAX:
        pytest.skip("this environment already has the older jax")
    base = tmp_path_factory.mktemp("versions")
    made = subprocess.run([sys.executable, "-m", "experiments", "venv", str(base / "old"), f"jax=={OLD_JAX}",
                           f"jaxlib=={OLD_JAX}"], cwd=ROOT, capture_output=True, text=True)
    if made.returncode and "No matching distribution" in made.stderr:
        pytest.skip(f"jax {OLD_JAX} is not on the package index here")
    assert made.returncode == 0, made.stderr[-2000:]
    old_python = made.stdout.strip().split("=", 1)[1]
    # two replicates per environment, interleaved: the last override varies fastest
    r = run(["-m", "framework=jax", "model=lenet", "batch_size=32", "bench=quick", "repeat=0,1",
             f"runtime.python={old_python},null"], cwd=base)
    assert r.returncode == 0, r.stderr[-3000:]
    return base, f"sqlite:///{base}/mlruns/mlflow.db", old_python, jax.__version__


def compare(cwd, *args):
    return nnbench("compare", list(args), cwd)


@pytest.mark.slow
def test_versions_come_from_the_workers_interpreter(two_jax_sweep):
    _, uri, old_python, new_jax = two_jax_sweep
    df = runs(uri)
    got = set(zip(df["params.config.runtime.python"], df["tags.jax_version"]))
    assert got == {(old_python, OLD_JAX), ("None", new_jax)}
    in_order = df.sort_values("start_time")["tags.jax_version"].tolist()
    assert in_order == [OLD_JAX, new_jax, OLD_JAX, new_jax]  # interleaved replicates
    assert df["tags.env_fingerprint"].nunique() == 2  # same point, two environments
    assert set(df["tags.python_executable"]) == {old_python, sys.executable}


@pytest.mark.slow
def test_compare_by_version_gives_a_verdict_per_point(two_jax_sweep, tmp_path):
    cwd, _, _, new_jax = two_jax_sweep
    r = compare(cwd, "model=lenet", "--by", "jax_version", "--out", str(tmp_path / "rep"))
    assert r.returncode == 0, r.stderr
    c = pd.read_csv(tmp_path / "rep" / "changes.csv")
    assert sorted(c["op"]) == ["inference", "training"]
    assert (c["old"] == OLD_JAX).all() and (c["new"] == new_jax).all()
    assert (c["runs_old"] == 2).all() and (c["runs_new"] == 2).all()
    assert set(c["verdict"]) <= {"faster", "slower", "no change"}
    assert ((c["ci95_low"] <= c["ratio"]) & (c["ratio"] <= c["ci95_high"])).all()
    assert {"report.md", "report.html", "trend_lenet_inference.png", "trend_lenet_training.png"} <= {
        p.name for p in (tmp_path / "rep").iterdir()}
    assert f"{OLD_JAX} → {new_jax}" in r.stdout


@pytest.mark.slow
def test_interpreter_without_the_framework_is_a_clear_error(tmp_path):
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "bare")], check=True)
    r = run(["framework=jax", "model=lenet", f"runtime.python={tmp_path / 'bare' / 'bin' / 'python'}"], cwd=tmp_path)
    assert r.returncode != 0
    last = r.stderr.strip().splitlines()[-1]
    assert "cannot measure framework=jax" in last and "No module named" in last and "nnbench venv" in last
    assert not (tmp_path / "mlruns" / "mlflow.db").exists()


def _log_synthetic(uri, exp_id, version, median, rng, tmp):
    """A real run in a real store, with synthetic samples: a known truth for the exit code."""
    cfg = {"framework": {"name": "torch", "compile": False}, "model": {"name": "lenet"},
           "precision": {"name": "fp32", "tf32": False}, "device": "cpu"}
    line = PointResult(32, "cpu", {"torch_version": version},
                       {"inference": ok_op(median, 32, list(median * rng.lognormal(0, 0.02, 50)))})
    point = Point(32, ("inference",))
    rec = records.build(Job(cfg, None, (point,)), point, [line])
    rec.save(tmp / version)
    tracking.log_record(uri, exp_id, rec, tmp / version)


@pytest.mark.parametrize("new_median,code", [(1.10e-3, 1), (1.0e-3, 0)])
def test_fail_on_regression(tmp_path, new_median, code):
    import numpy as np

    uri = f"sqlite:///{tmp_path}/mlruns/mlflow.db"
    (tmp_path / "mlruns").mkdir()
    exp = tracking.prepare_store(uri, "nnbench")
    rng = np.random.default_rng(0)
    _log_synthetic(uri, exp, "2.12.0", 1.0e-3, rng, tmp_path)
    _log_synthetic(uri, exp, "2.13.0", new_median, rng, tmp_path)
    r = compare(tmp_path, "--by", "torch_version", "--fail-on-regression", "--uri", uri)
    assert r.returncode == code, r.stderr
    assert ("slower" in r.stdout) == (code == 1)

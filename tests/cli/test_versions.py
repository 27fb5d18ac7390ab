"""Framework upgrades: a second real environment, and versions from the worker."""
import subprocess
import sys

import pytest

from tests.helpers import ROOT, run, runs

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
def test_interpreter_without_the_framework_is_a_clear_error(tmp_path):
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "bare")], check=True)
    r = run(["framework=jax", "model=lenet", f"runtime.python={tmp_path / 'bare' / 'bin' / 'python'}"], cwd=tmp_path)
    assert r.returncode != 0
    last = r.stderr.strip().splitlines()[-1]
    assert "cannot measure framework=jax" in last and "No module named" in last and "nnbench venv" in last
    assert not (tmp_path / "mlruns" / "mlflow.db").exists()

"""A framework added through the backends' seam alone (numpy: backends/numpy_*.py, conf/framework/numpy.yaml) joins a
real sweep beside jax and torch: paired with them, its inference measured, its training skipped with the reason."""
import pytest

from tests.helpers import BRIEF, run, runs, with_store


@pytest.mark.slow
def test_numpy_joins_a_sweep_paired_with_jax_and_torch(tmp_path):
    r = run(["-m", "framework=jax,torch,numpy", "model=mlp_relu", "batch_size=8", "ops=[inference,training]",
             "parity=false", *BRIEF], with_store(tmp_path))  # parity is the sweep's, not the seam's: not checked here
    assert r.returncode == 0, r.stderr[-3000:]
    df = runs(f"sqlite:///{tmp_path}/mlruns/mlflow.db")
    assert set(df["params.mode"]) == {"jax-jit", "torch-eager", "numpy-eager"} and set(df["status"]) == {"FINISHED"}
    assert set(df["tags.design"]) == {"paired"}
    numpy = df[df["params.mode"] == "numpy-eager"].iloc[0]
    assert numpy["metrics.inference_n_samples"] > 1 and numpy["params.device"] == "cpu"
    assert numpy["tags.skip_reason_training"] == "the numpy backend measures inference only (asked: training)"
    assert (df[df["params.mode"] != "numpy-eager"]["metrics.training_n_samples"] > 1).all()
    assert "numpy-eager fp32 vs torch-eager fp32: inference " in r.stdout

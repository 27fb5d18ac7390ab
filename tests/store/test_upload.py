"""Results kept on disk reach the store later: nothing lost when the store was down during a sweep."""
import mlflow

import pytest

from experiments import cli
from experiments.store import tracking
from experiments.sweep import preflight
from experiments.store.sweepdir import Sweep, SweepState
from tests.helpers import forget, with_store
from tests.helpers.groups import measured_together


@pytest.mark.slow
def test_upload_logs_saved_points_once(tmp_path, fake_python, monkeypatch, make_cfg, capsys):
    """A paired group as its leader saves it (each job's points in `<leader>/job-<i>/`): jax's stand-in crashes as
    it prepares every second cell, so two of its points failed; upload logs all eight, once. Into a store that lost
    the sweep (deleted since), upload logs them again, under a new parent run."""
    monkeypatch.setenv("FAKE_FAULT", "segv")
    monkeypatch.setenv("FAKE_FAULT_SIDE", "jax")
    jobs = [preflight.job(preflight.typed(make_cfg(f"framework={fw}", "model=lenet", "ops=[inference]", "bench=quick",
                                                   f"runtime.python={fake_python}"))) for fw in ("jax", "torch")]
    recs = [r for k in measured_together(jobs, tmp_path / "multirun" / "0") for r in k.records]  # not logged
    uri = f"sqlite:///{with_store(tmp_path, 'store.db')}/store.db"
    exp = tracking.Store(uri).prepare("nnbench")
    parent = tracking.Store(uri).start_parent(exp, "sweep", {})
    Sweep(tmp_path / "multirun").write(SweepState(uri, exp, parent, 2, 8, 0.0, ended="finished"))  # as a sweep leaves it
    assert cli.main(["upload", str(tmp_path / "multirun"), "--uri", uri]) == 0
    mlflow.set_tracking_uri(uri)
    df = mlflow.search_runs(experiment_names=["nnbench"], filter_string=f"tags.mlflow.parentRunId = '{parent}'")
    assert sorted(df["tags.mlflow.runName"]) == sorted(r.run_name for r in recs)
    assert sorted(df["status"]) == ["FAILED"] * 2 + ["FINISHED"] * 6
    assert sorted(df[df["status"] == "FAILED"]["params.batch_size"]) == ["128", "8"]  # jax's second and fourth cells
    ok = df[df["status"] == "FINISHED"]
    assert set(ok["metrics.inference_median_s"]) == {0.001} and set(df["tags.design"]) == {"paired"}
    assert cli.main(["upload", str(tmp_path / "multirun"), "--uri", uri]) == 0
    assert "nothing to log" in capsys.readouterr().out
    assert len(mlflow.search_runs(experiment_names=["nnbench"])) == 9  # the 8 points and their parent

    (tmp_path / "store.db").unlink()  # the store deleted (or replaced) since: it has lost the sweep's parent
    forget(uri)
    assert cli.main(["upload", str(tmp_path / "multirun"), "--uri", uri]) == 0
    out = capsys.readouterr().out
    assert f"has no parent run {parent}: its points go under a new one" in out and out.count("logged as run") == 8
    df = mlflow.search_runs(experiment_names=["nnbench"])
    (new,) = df[df["tags.nnbench.sweep"] == "true"]["run_id"]
    assert new != parent and Sweep(tmp_path / "multirun").read().parent_run_id == new
    assert sorted(df[df["run_id"] != new]["tags.mlflow.parentRunId"]) == [new] * 8
    assert sorted(df["status"]) == ["FAILED"] * 2 + ["FINISHED"] * 7  # the points as before, the parent closed

"""Results kept on disk reach the store later: nothing lost when the store was down during a sweep."""
import mlflow

from experiments import cli
from experiments.store import tracking
from experiments.sweep import points, preflight
from experiments.store.sweepdir import Sweep, SweepState


def test_upload_logs_saved_points_once(tmp_path, fake_python, monkeypatch, make_cfg, capsys):
    monkeypatch.setenv("FAKE_FAULT", "segv")
    cfg = make_cfg("framework=torch", "model=lenet", "bench=quick", f"runtime.python={fake_python}")
    recs = points.run_job(preflight.job(preflight.typed(cfg)), tmp_path / "multirun" / "0").records  # not logged
    uri = f"sqlite:///{tmp_path}/store.db"
    exp = tracking.prepare_store(uri, "nnbench")
    parent = tracking.start_parent(uri, exp, "sweep", {})
    Sweep(tmp_path / "multirun").write(SweepState(uri, exp, parent, 1, 4, 0.0, ended="finished"))  # as a sweep leaves it
    assert cli.main(["upload", str(tmp_path / "multirun"), "--uri", uri]) == 0
    mlflow.set_tracking_uri(uri)
    df = mlflow.search_runs(experiment_names=["nnbench"], filter_string=f"tags.mlflow.parentRunId = '{parent}'")
    assert sorted(df["tags.mlflow.runName"]) == sorted(r.run_name for r in recs)
    assert sorted(df["status"]) == ["FAILED", "FAILED", "FINISHED", "FINISHED"]
    ok = df[df["status"] == "FINISHED"].iloc[0]
    assert ok["metrics.inference_median_s"] == 0.001
    assert cli.main(["upload", str(tmp_path / "multirun"), "--uri", uri]) == 0
    assert "nothing to log" in capsys.readouterr().out
    assert len(mlflow.search_runs(experiment_names=["nnbench"])) == 5  # the 4 points and their parent

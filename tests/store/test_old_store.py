"""A store that outlives nnbench's upgrades: one written by an older nnbench, with new runs beside it.

tests/fixtures/old-store.tar.gz holds a store and its sweep dir written by the nnbench of commit 6df682c (the
last before machine numbers moved from tags to metrics and a skipped point became FINISHED): the README-sized
sweep `framework=jax,torch model=mlp_relu ops=[inference] bench=quick`, real workers. tests/fixtures/
make_old_store.sh rebuilds it. A new sweep (the fake worker) measures the torch points again into the same store;
`history`, `compare`, `resume` and `upload` then read old and new runs together.
"""
import json
import sqlite3
import tarfile

import pandas as pd
import pytest
from mlflow.tracking import MlflowClient

from experiments.cli import main
from experiments.store import tracking
from experiments.store.records import FORMAT, FORMAT_TAG
from tests.helpers import ROOT, fake_interpreter, run

pytestmark = pytest.mark.slow
OLD_COMMIT = "6df682c"
NEW = ["-m", "framework=torch", "model=mlp_relu", "ops=[inference]", "bench=quick"]
SIZES = [2, 8, 32, 128, 512, 2048]


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """The old store unpacked (its artifacts pointed at where it now is), then the new sweep logged into it:
    (folder, uri, the fake interpreter)."""
    root = tmp_path_factory.mktemp("old-store")
    with tarfile.open(ROOT / "tests" / "fixtures" / "old-store.tar.gz") as tar:
        tar.extractall(root, filter="data")
    con = sqlite3.connect(root / "mlruns" / "mlflow.db")
    for table, column in (("experiments", "artifact_location"), ("runs", "artifact_uri")):
        con.execute(f"UPDATE {table} SET {column} = replace({column}, 'file:///nnbench-old-store', ?)",
                    (root.as_uri(),))
    con.commit()
    con.close()
    fake = fake_interpreter(tmp_path_factory.mktemp("fake"))
    r = run([*NEW, f"runtime.python={fake}"], root, FAKE_FAULT="none", FAKE_MEDIAN_PER_BATCH="1")
    assert r.returncode == 0, r.stderr[-3000:]
    return root, f"sqlite:///{root}/mlruns/mlflow.db", fake


def point_runs(uri: str) -> pd.DataFrame:
    df = tracking.Store(uri).search("nnbench")
    return df[df["params.model"].notna()]


def old(df: pd.DataFrame) -> pd.Series:
    return df["tags.nnbench_git_commit"].str.startswith(OLD_COMMIT)


def test_old_runs_are_read_as_new_ones_are_written(store):
    _, uri, _ = store
    df = point_runs(uri)
    assert old(df).sum() == 12 and (~old(df)).sum() == 6
    assert df[old(df)][f"tags.{FORMAT_TAG}"].isna().all()  # written before the tag
    assert (df[~old(df)][f"tags.{FORMAT_TAG}"] == str(FORMAT)).all()
    raw = MlflowClient(uri).get_run(df[old(df)]["run_id"].iloc[0]).data
    assert "load_avg_1m" in raw.tags and "load_avg_1m" not in raw.metrics  # the old layout, as stored
    for key in ("load_avg_1m", "cpu_count_logical", "memory_total_bytes", "param_count"):  # read as metrics
        assert df[old(df)][f"metrics.{key}"].notna().all(), key
    assert (df[old(df)]["metrics.param_count"] == df[old(df)]["params.param_count"].astype(float)).all()


def test_compare_reads_old_and_new_runs_of_a_point_together(store, tmp_path):
    _, uri, _ = store
    assert main(["compare", "model=mlp_relu", "--uri", uri, "--out", str(tmp_path)]) == 0
    s = pd.read_csv(tmp_path / "summary.csv")
    torch, jax = s[s["variant"] == "torch-eager fp32"], s[s["variant"] == "jax-jit fp32"]
    assert sorted(torch["batch_size"]) == SIZES and (torch["runs"] == 2).all()  # the old run and the new, folded
    assert sorted(jax["batch_size"]) == SIZES and (jax["runs"] == 1).all()
    assert s["speedup_vs_torch-eager_fp32"].notna().all()


def test_history_follows_each_point_from_the_old_nnbench_to_the_new(store, tmp_path, capsys):
    _, uri, _ = store
    assert main(["history", "--by", "nnbench_git_commit", "model=mlp_relu", "framework=torch", "--uri", uri,
                 "--out", str(tmp_path)]) == 0
    assert capsys.readouterr().out.startswith(f"6 points along nnbench_git_commit: {OLD_COMMIT}")
    series = pd.read_csv(tmp_path / "series.csv")
    df = point_runs(uri)
    for _, run_ in df[df["params.framework"] == "torch"].iterrows():  # each run, at its own commit, with its median
        row = series[(series["batch_size"] == int(run_["params.batch_size"]))
                     & (series["value"] == run_["tags.nnbench_git_commit"])]
        assert len(row) == 1
        assert row["median_s"].iloc[0] == pytest.approx(run_["metrics.inference_median_s"], rel=1e-6)


def test_resume_skips_what_the_new_runs_finished(store):
    root, _, fake = store
    r = run([*NEW, f"runtime.python={fake}", "resume=true"], root, FAKE_FAULT="none", FAKE_MEDIAN_PER_BATCH="1")
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.strip().splitlines()[-1] == "0 finished, 0 skipped, 0 failed, 6 already in the store (resume)"


def test_upload_completes_an_old_sweep_with_each_point_once(store, monkeypatch, capsys):
    """Two of the old sweep's points lost their runs (deleted) and markers: upload logs them again from the old
    records on disk, leaves the rest alone, and a second upload finds nothing to do."""
    root, uri, _ = store
    (sweep,) = [p for p in root.glob("multirun/*/*/nnbench-sweep.json") if json.loads(p.read_text())["points"] == 12]
    parent = json.loads(sweep.read_text())["parent_run_id"]  # the old sweep's: the new ones have 6 points
    lost = sorted(sweep.parent.glob("0/points/*/mlflow_run_id"))[:2]
    client = MlflowClient(uri)
    for marker in lost:
        client.delete_run(marker.read_text().strip())
        marker.unlink()
    monkeypatch.chdir(root)  # where the old sweep's store is (sqlite:///mlruns/mlflow.db)
    assert main(["upload", str(sweep.parent)]) == 0
    out = capsys.readouterr().out
    assert out.count("logged as run") == 2 and f"parent run {parent} FINISHED" in out
    df = point_runs(uri)
    mine = df[df["tags.mlflow.parentRunId"] == parent]
    assert len(mine) == 12 and mine.groupby(["params.framework", "params.batch_size"]).size().eq(1).all()
    assert mine["metrics.load_avg_1m"].notna().all()  # the two relogged from old records read as the others
    assert main(["upload", str(sweep.parent)]) == 0
    assert "every point is in its store" in capsys.readouterr().out

"""A tracking server (tests/cluster/tracking.sh: PostgreSQL, `mlflow server --artifacts-destination`) whose
artifact destination sits on a small tmpfs that fills up, then turns read-only, while its database answers: the
sweep keeps every point on disk, leaves nothing RUNNING and says in one line what happened and the repair; once
the fault is cleared, `nnbench upload` completes the store, each point exactly once.

Points come from the fake worker (tests/helpers/fake_worker.py), which fills the disk as it prepares its first cell.
"""
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from tests.helpers import ROOT, nnbench, run
from tests.helpers.faults import remount_readonly, small_disk
from tests.sweep.test_faults import every_run

pytestmark = pytest.mark.slow
CLUSTER = ROOT / "tests" / "cluster"
REASON = "took the runs but not their artifacts: its artifact destination may be full or read-only"


@pytest.fixture(scope="module")
def server_on_a_small_disk():
    """tracking.sh's server with its artifact destination on a 2 MB tmpfs: (uri, the tmpfs)."""
    state = Path(tempfile.mkdtemp(prefix="nnbench-tracking-"))  # the postgres user must reach it
    env = {**os.environ, "PYTHON": sys.executable, "NNBENCH_TRACKING_DIR": str(state)}
    with small_disk(state / "artifacts", 2) as disk:
        r = subprocess.run(["bash", str(CLUSTER / "tracking.sh"), "up"], env=env, capture_output=True, text=True,
                           timeout=300)
        assert r.returncode == 0, r.stderr[-2000:]
        try:
            yield r.stdout.strip().splitlines()[-1], disk
        finally:
            subprocess.run(["bash", str(CLUSTER / "tracking.sh"), "down"], env=env, capture_output=True, timeout=120)
    shutil.rmtree(state, ignore_errors=True)


def sweep(cwd: Path, uri: str, *args: str, **env: str) -> str:
    """A sweep that the fault stops logging: its one line (no retries of the failed uploads, which only wait)."""
    r = run(["-m", "ops=[inference]", "bench=quick", *args], cwd, FAKE_FAULT="none",
            FAKE_MEDIAN_PER_BATCH="1", MLFLOW_TRACKING_URI=uri, MLFLOW_HTTP_REQUEST_MAX_RETRIES="0", **env)
    assert r.returncode == 1, r.stderr[-3000:]
    assert "Traceback" not in r.stdout + r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr[-3000:]
    return lines[0]


def test_a_full_then_read_only_artifact_store_loses_nothing(server_on_a_small_disk, tmp_path, fake_python):
    uri, disk = server_on_a_small_disk
    full, read_only = tmp_path / "full", tmp_path / "read-only"
    full.mkdir(), read_only.mkdir()
    line = sweep(full, uri, "model=lenet", "framework=jax,torch", f"runtime.python={fake_python}",
                 FAKE_FILL_DISK=str(disk / "junk"))
    assert line.startswith(f"nnbench: error: 8 finished, 0 skipped, 0 failed, 8 not logged (the tracking server "
                           f"at {uri} {REASON}); the sweep's report is not in the store either; the points are kept in ")
    assert f"nnbench upload {full}/multirun/" in line
    assert len(list(full.glob("multirun/*/*/0/job-*/points/*/record.json"))) == 8  # every point on disk, paired
    assert "RUNNING" not in {r.info.status for r in every_run(uri)}

    (disk / "junk").unlink()
    remount_readonly(disk)
    line = sweep(read_only, uri, "model=mlp_relu", "framework=torch", "batch_size=2", f"runtime.python={fake_python}")
    assert line.startswith(f"nnbench: error: 1 finished, 0 skipped, 0 failed, 1 not logged (the tracking server at "
                           f"{uri} {REASON})")
    assert "RUNNING" not in {r.info.status for r in every_run(uri)}

    subprocess.run(["mount", "-o", "remount,rw", str(disk)], check=True)
    for cwd in (full, read_only):
        up = nnbench("upload", [str(cwd / "multirun")], cwd)
        assert up.returncode == 0, up.stderr
        assert "FINISHED" in up.stdout.strip().splitlines()[-1]
    again = nnbench("upload", [str(full / "multirun")], full)
    assert "every point is in its store" in again.stdout
    client, runs = MlflowClient(uri), every_run(uri)
    parents = [r for r in runs if r.data.tags.get("nnbench.sweep") == "true"]
    assert sorted(r.info.status for r in parents) == ["FINISHED", "FINISHED"]
    for parent in parents:
        points = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
        sizes = sorted(int(r.data.params["batch_size"]) for r in points)
        assert sizes in ([2, 2, 8, 8, 32, 32, 128, 128], [2])  # each point once
        for r in points:
            assert r.info.status == "FINISHED" and r.info.lifecycle_stage == "active"
            assert "nnbench.incomplete" not in r.data.tags
            assert {"record.json", "samples.json"} <= {a.path for a in client.list_artifacts(r.info.run_id)}
        assert "report.md" in {a.path for a in client.list_artifacts(parent.info.run_id)}
    assert "RUNNING" not in {r.info.status for r in runs}

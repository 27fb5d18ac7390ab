"""What a failing store leaves behind is repaired, never duplicated: half-logged runs are completed by upload,
runs a dead sweep left RUNNING are closed by the next sweep."""
import pytest
from mlflow.entities import ViewType
from mlflow.tracking import MlflowClient

from experiments import cli
from experiments.store import repair, tracking
from experiments.sweep import preflight
from experiments.store.records import Record
from experiments.store.sweepdir import MARKER, Sweep, SweepState
from tests.helpers import with_store
from tests.helpers.groups import measured_together


@pytest.fixture
def store(tmp_path):
    uri = f"sqlite:///{with_store(tmp_path, 'store.db')}/store.db"
    return uri, tracking.Store(uri).open("nnbench")


def point_runs(uri: str, exp: str):
    return [r for r in MlflowClient(uri).search_runs([exp], run_view_type=ViewType.ALL) if "nnbench.sweep" not in
            r.data.tags]


@pytest.mark.slow
def test_upload_completes_half_logged_runs_and_logs_each_point_once(tmp_path, store, fake_python, monkeypatch,
                                                                    make_cfg):
    monkeypatch.setenv("FAKE_FAULT", "none")
    uri, exp = store
    jobs = [preflight.job(preflight.typed(make_cfg(f"framework={fw}", "model=lenet", "ops=[inference]", "bench=quick",
                                                   f"runtime.python={fake_python}"))) for fw in ("jax", "torch")]
    measured_together(jobs, tmp_path / "sweep" / "0")  # a paired group, its jobs' points under its leader's dir
    parent = tracking.Store(uri).start_parent(exp, "sweep", {})
    sweep = Sweep(tmp_path / "sweep")
    sweep.write(SweepState(uri, exp, parent, 2, 8, 0.0, ended="incomplete"))
    d = sweep.point_dirs()
    assert len(d) == 8 and {p.parents[1].name for p in d} == {"job-0", "job-1"}
    client = MlflowClient(uri)

    def created(directory):  # what a store failure right after create_run leaves: a RUNNING run, nothing in it
        return client.create_run(exp, tags={tracking.POINT_DIR: str(directory.resolve())}).info.run_id

    half = created(d[0])
    (d[0] / MARKER).write_text(half)  # the marker was written, the store failed before the run was filled
    orphan = created(d[1])  # the store failed even before the marker could be written
    tracking.Store(uri).log_record(exp, Record.load(d[2]), d[2], parent, on_created=(d[2] / MARKER).write_text)

    assert cli.main(["upload", str(tmp_path / "sweep")]) == 0
    runs = point_runs(uri, exp)
    assert len(runs) == 8 and all(tracking.is_complete(r) for r in runs)
    assert {(p / MARKER).read_text() for p in d} == {r.info.run_id for r in runs}
    assert (d[0] / MARKER).read_text() == half and (d[1] / MARKER).read_text() == orphan  # completed, not replaced
    assert all(r.data.tags["mlflow.parentRunId"] == parent and r.data.metrics["inference_median_s"] == 0.001
               for r in runs)
    assert client.get_run(parent).info.status == "FINISHED"
    assert cli.main(["upload", str(tmp_path / "sweep")]) == 0
    assert len(point_runs(uri, exp)) == 8


@pytest.mark.slow
def test_next_sweep_closes_runs_a_dead_sweep_left_running_and_spares_a_live_one(tmp_path, store, caplog):
    uri, exp = store
    client = MlflowClient(uri)
    left: dict[str, tuple[str, str]] = {}
    for name, ended in (("dead", "interrupted"), ("alive", None)):
        sweep = Sweep(tmp_path / name)
        parent = tracking.Store(uri).start_parent(exp, name, {"sweep_dir": str(sweep.directory)})
        state = SweepState(uri, exp, parent, 1, 1, 0.0, ended=ended)
        if ended is None:
            sweep.start(state)  # this process holds its lock, as a running sweep's does
        else:
            sweep.directory.mkdir()
            sweep.write(state)
        point = client.create_run(exp, tags={tracking.POINT_DIR: str(sweep.directory / "0" / "points" / "p"),
                                             "mlflow.parentRunId": parent}).info.run_id
        left[name] = parent, point
    repair.close_stale(tracking.Store(uri), exp)
    parent, point = left["dead"]
    assert client.get_run(parent).info.status == "KILLED"
    assert client.get_run(point).info.status == "FAILED" and tracking.INCOMPLETE in client.get_run(point).data.tags
    assert all(client.get_run(r).info.status == "RUNNING" for r in left["alive"])  # its process holds the lock
    assert f"closed 2 run(s) that a failed store left RUNNING in {tmp_path / 'dead'}" in caplog.text

"""Faults a sweep must survive without losing, duplicating or crossing a point, or leaving a run RUNNING:
Ctrl-C and SIGTERM, a tracking server killed while it logs, a full disk, a read-only store, concurrent sweeps.

Points come from the fake worker (tests/helpers/fake_worker.py): fast, and with FAKE_MEDIAN_PER_BATCH=1 every
sample says which point it belongs to.
"""
import contextlib
import json
import os
import signal
import subprocess
import sys
import time

import pytest
from mlflow.entities import ViewType
from mlflow.tracking import MlflowClient

from experiments.store import tracking
from tests.helpers import free_port, nnbench, run, run_at_once, runs, serve, user_env, with_store
from tests.helpers.faults import KillingProxy, launch, processes_under, remount_readonly, small_disk, wait_for


def records(root):
    return sorted(root.glob("multirun/**/points/*/record.json"))


def outcome(path) -> str:
    return json.loads(path.read_text())["outcome"]


def every_run(uri: str):
    """Every run of the experiment, deleted ones too: a duplicate can't hide."""
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("nnbench")
    return client.search_runs([exp.experiment_id], run_view_type=ViewType.ALL, max_results=1000)


def assert_once_each_and_closed(uri: str, batch_sizes: list[int]) -> None:
    """Each point has exactly one run, with its own numbers, and no run is RUNNING."""
    all_runs = every_run(uri)
    assert not [r for r in all_runs if r.info.status == "RUNNING"]
    points = [r for r in all_runs if "batch_size" in r.data.params]
    assert sorted(int(r.data.params["batch_size"]) for r in points) == sorted(batch_sizes)
    for r in points:
        assert r.info.lifecycle_stage == "active" and tracking.INCOMPLETE not in r.data.tags
        if r.data.tags["outcome"] == "ok":
            assert r.data.metrics["inference_median_s"] == pytest.approx(int(r.data.params["batch_size"]) * 1e-4)


@pytest.mark.slow
@pytest.mark.parametrize("signum,sweep", [(signal.SIGINT, True), (signal.SIGTERM, True), (signal.SIGINT, False)],
                         ids=["sigint-to-group", "sigterm-to-main", "sigint-single-run"])
def test_interrupt_during_trials_keeps_the_group_as_interrupted_and_closes_every_run(tmp_path, fake_python, signum,
                                                                                    sweep):
    """Ctrl-C reaches the whole process group (a terminal); SLURM's time limit sends SIGTERM to the main process. It
    lands while a worker prepares lenet's third cell (its first trial): every point of the group is saved as
    interrupted (KILLED) with what the trials measured, the next group (mlp_relu) is not measured, no worker is left."""
    args = ["-m", "framework=jax,torch", "model=lenet,mlp_relu"] if sweep else ["framework=torch", "model=lenet"]
    proc = launch([*args, "bench=quick", f"runtime.python={fake_python}"], with_store(tmp_path), FAKE_FAULT="none",
                  FAKE_LONG_POINT="2", FAKE_MEDIAN_PER_BATCH="1")
    root = tmp_path / ("multirun" if sweep else "outputs")
    trials = lambda: list(root.glob("**/trials/*/trial-0.json"))  # noqa: E731
    wait_for(lambda: len(trials()) >= 2 or proc.poll() is not None, "two cells measured")
    if signum == signal.SIGINT:
        os.killpg(proc.pid, signal.SIGINT)
    else:
        proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signum, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"nnbench: interrupted by {signum.name}: "), err
    points = 8 if sweep else 4  # lenet's, of each framework
    assert f"0 finished, 0 skipped, 0 failed, {points} interrupted" in lines[0] and "nnbench upload" in lines[0]
    assert (", 12 not measured" in lines[0]) == sweep  # mlp_relu's group: not started
    assert "Traceback" not in out + err
    assert not processes_under(tmp_path)  # the workers were stopped at once, not left measuring
    saved = sorted(root.glob("**/points/*/record.json"))
    assert len(saved) == points and {outcome(p) for p in saved} == {"interrupted"}
    uri = f"sqlite:///{tmp_path}/mlruns/mlflow.db"
    assert list(runs(uri, parents=True)["status"]) == (["KILLED"] if sweep else [])
    df = runs(uri)
    assert len(df) == points and set(df["status"]) == {"KILLED"} and set(df["params.model"]) == {"lenet"}
    assert df["tags.failure_reason"].str.startswith(f"interrupted by {signum.name} while the cell's trials ran").all()
    for record in saved:  # each keeps its samples from the trials (bs2's and bs8's cells ended before the signal)
        samples = json.loads(f.read_text()) if (f := record.parent / "samples.json").exists() else {}
        bs = json.loads(record.read_text())["params"]["batch_size"]
        assert (bs in ("2", "8")) == bool(samples), (record, samples)
        assert all(x == pytest.approx(int(bs) * 1e-4) for op in samples.values() for x in op["samples_s"])
    assert_once_each_and_closed(uri, [int(s) for s in df["params.batch_size"]])
    up = nnbench("upload", [str(root)], tmp_path)
    assert up.returncode == 0 and "every point is in its store" in up.stdout  # all kept points were logged


DEFERRAL = """
import os, signal, time
from experiments.sweep import stopping
stopping.install()
stopping.defer()
os.kill(os.getpid(), signal.SIGTERM)
print("went on", stopping.pending())
try:
    stopping.checkpoint()
except stopping.Signalled as e:
    print("raised at the checkpoint", e.signum)
stopping.at_once()
try:
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(5)
except stopping.Signalled:
    print("raised at once")
"""


def test_a_deferred_signal_waits_for_a_checkpoint(tmp_path):
    r = subprocess.run([sys.executable, "-c", DEFERRAL], cwd=tmp_path, env=user_env(), capture_output=True, text=True,
                       timeout=60)
    assert r.stdout.splitlines() == ["went on 15", "raised at the checkpoint 15", "raised at once"], r.stderr


@pytest.mark.slow
def test_sigterm_inside_hydra_between_jobs_ends_the_sweep_cleanly(tmp_path, fake_python):
    """The signal lands in Hydra's code between two jobs (where OmegaConf once turned it into its own traceback and
    left the parent RUNNING): the next job does not start, the sweep closes, one line, exit 143."""
    r = run(["-m", "model=mlp_relu", "framework=torch", "ops=[inference]", "batch_size=2,4,8", "bench=quick",
             f"runtime.python={fake_python}", "+hydra.callbacks.signal_self._target_=tests.helpers.callbacks.SignalSelf",
             "+hydra.callbacks.signal_self.after_job=1", f"+hydra.callbacks.signal_self.went_on={tmp_path}/went_on"],
            with_store(tmp_path), FAKE_FAULT="none")
    assert r.returncode == 143, r.stderr[-3000:]
    assert (tmp_path / "went_on").exists()  # the signal did not raise inside Hydra's code
    lines = r.stderr.strip().splitlines()
    assert lines[-1].startswith("nnbench: interrupted by SIGTERM: 1 finished, 0 skipped, 0 failed, 2 not measured")
    assert "Traceback" not in r.stdout + r.stderr
    uri = f"sqlite:///{tmp_path}/mlruns/mlflow.db"
    assert list(runs(uri, parents=True)["status"]) == ["KILLED"]
    assert list(runs(uri)["status"]) == ["FINISHED"]


@pytest.mark.slow
def test_a_job_that_cannot_read_the_sweep_state_costs_only_its_points(tmp_path, fake_python):
    """A job that can't start (here: the sweep's state file is missing while it starts) is one logged line; the
    sweep goes on, closes its parent FAILED and counts the job's points as lost (a SystemExit from the job would
    pass Hydra by and leave the parent RUNNING)."""
    r = run(["-m", "model=mlp_relu", "framework=torch", "ops=[inference]", "batch_size=2,4,8", "bench=quick",
             f"runtime.python={fake_python}", "+hydra.callbacks.hide._target_=tests.helpers.callbacks.HideSweepState",
             "+hydra.callbacks.hide.job=1"], with_store(tmp_path), FAKE_FAULT="none")
    assert r.returncode == 1, r.stderr[-3000:]
    assert "not run: " in r.stdout  # the job's one logged line
    assert r.stderr.strip().splitlines()[-1].startswith("nnbench: error: 2 finished, 0 skipped, 0 failed, 1 lost")
    uri = f"sqlite:///{tmp_path}/mlruns/mlflow.db"
    assert list(runs(uri, parents=True)["status"]) == ["FAILED"]
    assert sorted(runs(uri)["params.batch_size"], key=int) == ["2", "8"]


@pytest.mark.slow
@pytest.mark.parametrize("delay_s", [0.1, 0.4, 0.8])
def test_sigterm_after_the_last_line_leaves_a_closed_sweep(tmp_path, fake_python, delay_s):
    """A signal that comes once the sweep has printed its last line (Python tearing down) neither kills the process
    outright nor reopens what was closed: exit 0, the parent FINISHED."""
    proc = launch(["-m", "model=mlp_relu", "framework=torch", "ops=[inference]", "batch_size=2", "bench=quick",
                   f"runtime.python={fake_python}"], with_store(tmp_path), FAKE_FAULT="none")
    while (line := proc.stdout.readline()) and "finished, 0 skipped" not in line:
        pass
    time.sleep(delay_s)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err[-2000:]
    assert list(runs(f"sqlite:///{tmp_path}/mlruns/mlflow.db", parents=True)["status"]) == ["FINISHED"]


@pytest.mark.slow
def test_server_killed_while_logging_leaves_nothing_running_or_twice(tmp_path, fake_python):
    """The server dies in the middle of a point's logging (its run created, its data not): the sweep ends with
    one line; the next sweep closes the runs left RUNNING; upload completes the half-logged run and logs the
    rest, each point exactly once."""
    port, store, art = free_port(), f"sqlite:///{tmp_path}/server.db", tmp_path / "art"
    with_store(tmp_path, "server.db")
    server = serve(store, port, art)
    # log-batch requests: 1 the parent's params, 2 point bs2, 3 point bs8 (killed: its run stays half-logged)
    proxy = KillingProxy(port, server, "/runs/log-batch", nth=3)
    uri = f"http://127.0.0.1:{proxy.port}"
    args = ["-m", "framework=torch", "model=lenet", "bench=quick", f"runtime.python={fake_python}"]
    try:
        r = run(args, tmp_path, FAKE_FAULT="none", FAKE_MEDIAN_PER_BATCH="1", MLFLOW_TRACKING_URI=uri)
        assert r.returncode == 1
        last = r.stderr.strip().splitlines()[-1]
        assert last.startswith("nnbench: error: ") and "nnbench upload" in last, r.stderr
        assert "Traceback" not in r.stdout + r.stderr
        assert len(records(tmp_path)) == 4  # every point is on disk
        server = serve(store, proxy.port, art)  # the server is back, at the same address
        again = run(["framework=torch", "model=mlp_relu", "batch_size=3", "ops=[inference]", "bench=quick",
                     f"runtime.python={fake_python}"], tmp_path, FAKE_FAULT="none",
                    FAKE_MEDIAN_PER_BATCH="1", MLFLOW_TRACKING_URI=uri)
        assert again.returncode == 0, again.stderr
        assert "closed 2 run(s) that a failed store left RUNNING" in again.stdout
        assert not [x for x in every_run(uri) if x.info.status == "RUNNING"]
        up = nnbench("upload", [str(tmp_path / "multirun")], tmp_path)
        assert up.returncode == 0, up.stderr
        assert "completed run" in up.stdout and up.stdout.count("logged as run") == 2
        assert_once_each_and_closed(uri, [2, 8, 32, 128, 3])
        (parent,) = runs(uri, parents=True).itertuples()
        assert parent.status == "FINISHED"
        assert "report.md" in {a.path for a in MlflowClient(uri).list_artifacts(parent.run_id)}
    finally:
        proxy.close()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)


@pytest.mark.slow
def test_full_disk_stops_the_sweep_in_one_line_and_keeps_what_was_saved(tmp_path, fake_python):
    """lenet's group is measured, saved and logged; mlp_relu's worker then fills the disk before its first cell, whose
    trial can't be saved: the sweep stops in one line, lenet's points kept, and upload closes the sweep."""
    with small_disk(tmp_path / "disk", 24) as disk:
        r = run(["-m", "framework=torch", "model=lenet,mlp_relu", "bench=quick", f"runtime.python={fake_python}"],
                with_store(disk), FAKE_FAULT="none", FAKE_MEDIAN_PER_BATCH="1", FAKE_FILL_DISK=str(disk / "junk"))
        assert r.returncode == 1
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("nnbench: error: stopped (No space left on device"), r.stderr
        assert "4 finished" in lines[0] and "Traceback" not in r.stdout + r.stderr, lines[0]
        saved = records(disk)  # lenet's group, saved before the disk filled
        assert len(saved) == 4 and {outcome(p) for p in saved} == {"ok"}
        assert not list(disk.glob("multirun/*/*/1/**/record.json"))
        (disk / "junk").unlink()
        up = nnbench("upload", [str(disk / "multirun")], disk)
        assert up.returncode == 0, up.stderr
        assert "FAILED" in up.stdout and "without a record" in up.stdout  # the sweep is closed, and says why
        uri = f"sqlite:///{disk}/mlruns/mlflow.db"
        assert_once_each_and_closed(uri, [2, 8, 32, 128])
        assert set(runs(uri, parents=True)["status"]) == {"FAILED"}


@pytest.mark.slow
def test_read_only_store_is_rejected_before_anything_runs(tmp_path, fake_python):
    with small_disk(tmp_path / "disk", 24) as disk:
        first = run(["framework=torch", "model=mlp_relu", "batch_size=2", "bench=quick",
                     f"runtime.python={fake_python}"], with_store(disk), FAKE_FAULT="none")
        assert first.returncode == 0, first.stderr
        remount_readonly(disk)
        r = run(["-m", "framework=torch", "model=mlp_relu", "bench=quick", f"runtime.python={fake_python}"], disk,
                FAKE_FAULT="none")
        assert r.returncode == 2
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("nnbench: error: cannot write the store"), r.stderr
        assert not (disk / "multirun").exists()


@pytest.mark.slow
def test_concurrent_sweeps_into_a_new_store_lose_and_cross_nothing(tmp_path, fake_python):
    """Four sweeps started at once in one folder: one store created once, four sweep dirs, each run its own."""
    done = run_at_once([["-m", "framework=torch", "model=mlp_relu", f"batch_size={i}1,{i}2", "ops=[inference]",
                         "bench=quick", f"runtime.python={fake_python}"] for i in range(1, 5)], tmp_path,
                       FAKE_FAULT="none", FAKE_MEDIAN_PER_BATCH="1")
    for r in done:
        assert r.returncode == 0, r.stderr
        assert r.stdout.strip().splitlines()[-1] == "2 finished, 0 skipped, 0 failed"
    assert len(list(tmp_path.glob("multirun/*/*/nnbench-sweep.json"))) == 4
    uri = f"sqlite:///{tmp_path}/mlruns/mlflow.db"
    sizes = [10 * i + j for i in range(1, 5) for j in (1, 2)]
    assert_once_each_and_closed(uri, sizes)
    df = runs(uri)
    for run_id, bs in zip(df["run_id"], df["params.batch_size"].astype(int)):
        samples = tracking.Store(uri).load_samples(run_id)["inference"]["samples_s"]  # as logged, not just the metric
        assert samples and all(s == pytest.approx(bs * 1e-4) for s in samples)
    parents = runs(uri, parents=True)
    assert len(parents) == 4 and set(parents["status"]) == {"FINISHED"}
    for parent in parents.itertuples():
        mine = df[df["tags.mlflow.parentRunId"] == parent.run_id]["params.batch_size"].astype(int)
        i = sorted(mine)[0] // 10
        assert sorted(mine) == [10 * i + 1, 10 * i + 2]
        assert f"batch_size={i}1,{i}2" in MlflowClient(uri).get_run(parent.run_id).data.params["overrides"]

"""profile=true: one more worker per job after its points' timed ones (paired: after the group's trials). The point's
record is saved before profiling starts and not one of its timings changes; a profiler that fails or is interrupted
costs the profile, never the point; a runner in another language is not profiled and says why. End to end: both
frameworks, the report and `compare --profile`. The collector's own cases run on the unpaired engine
(`unpaired_engine.run_job`, bench.paired=false), whose profiling the paired one shares.
"""
import json
import signal
from pathlib import Path

import pandas as pd
import pytest
from mlflow.tracking import MlflowClient

from experiments.common.protocol import CATEGORIES, OpProfile, OpResult, PointResult, ProfiledOp
from experiments.store import records
from experiments.sweep import preflight, stopping, unpaired_engine
from tests.harness.test_external import TEMPLATE
from tests.helpers import BRIEF, nnbench, ok_op, run, runs, with_store

TIMING = "_median_s"  # one of the timing metrics; every key the record had before profiling is compared


def fake_profile(request, op: str, batch: int) -> OpResult:
    out = Path(request.profile_dir) / f"bs{batch}" / op
    out.mkdir(parents=True)
    (out / "top.md").write_text("# top\n")
    parts = {"conv": 7e-4, "overhead": 3e-4}
    return OpResult("ok", device="cpu", profile=OpProfile(1e-3, parts, [1e-3] * 5, [ProfiledOp("c", "conv", 1, 7e-4)],
                                                          0.5))


@pytest.fixture
def job(make_cfg, tmp_path):
    """lenet training at its seed sizes (32, 128) in two timed processes, profile=true, unpaired."""
    return preflight.job(preflight.typed(make_cfg("framework=torch", "ops=[training]", "profile=true",
                                                  "bench=quick", "bench.processes=2", "bench.paired=false")))


def fake_measure(seen: list, profile_fault: str | None = None):
    """manager.run's stand-in: timed processes report 1 ms per call; the profiling worker notes what it finds on
    disk when it starts (every point's record.json) and answers each op, or fails."""

    def measure(request, job_dir, timeout_s, on_result, **_):
        if request.profile_dir is None:
            for p in request.points:
                on_result(PointResult(p.batch_size, "cpu", {"torch_version": "0"},
                                      {op: ok_op(1e-3, p.batch_size) for op in p.ops}))
            return
        seen.append({d.parent.name: json.loads(d.read_text()) for d in job_dir.parent.glob("points/*/record.json")})
        for p in request.points:
            if profile_fault:
                on_result(PointResult(p.batch_size, failure=profile_fault, stderr_tail="tail"))
            else:
                on_result(PointResult(p.batch_size, "cpu", {}, {op: fake_profile(request, op, p.batch_size)
                                                               for op in p.ops}))

    return measure


def test_records_are_saved_before_profiling_and_no_timing_changes(job, tmp_path, monkeypatch, caplog):
    seen = []
    monkeypatch.setattr(unpaired_engine.manager, "run", fake_measure(seen))
    with caplog.at_level("INFO", logger="nnbench"):
        recs = unpaired_engine.run_job(job, tmp_path).records
    (before,) = seen  # one profiling worker, started once both points were saved
    assert sorted(before) == ["lenet-torch-eager-fp32-bs128", "lenet-torch-eager-fp32-bs32"]
    for rec in recs:
        saved = before[rec.slug]
        assert "profile" not in saved["tags"] and any(k.endswith(TIMING) for k in saved["metrics"])
        assert {k: rec.metrics[k] for k in saved["metrics"]} == saved["metrics"]  # every timing, unchanged
        assert rec.metrics["training_time_conv_s"] == 7e-4 and rec.metrics["training_time_overhead_s"] == 3e-4
        assert rec.metrics["training_time_pool_s"] == 0.0 and rec.metrics["training_profile_wall_ratio"] == 1.0
        assert rec.tags["profile"] == "ok"
        assert (tmp_path / "points" / rec.slug / "profile" / "training" / "top.md").exists()
        assert json.loads((tmp_path / "points" / rec.slug / "record.json").read_text())["metrics"] == rec.metrics
    lines = [r.getMessage() for r in caplog.records]  # each point's line comes once it is profiled, with the profile
    assert sum("process 2 of 2 measured" in m for m in lines) == 2
    assert sum("training profiled: 1.000 ms (1.00× the median), most in conv (0.700 ms)" in m for m in lines) == 2


def test_a_failed_profile_keeps_the_point(job, tmp_path, monkeypatch):
    monkeypatch.setattr(unpaired_engine.manager, "run", fake_measure([], profile_fault="worker killed by SIGSEGV"))
    recs = unpaired_engine.run_job(job, tmp_path).records
    assert [r.outcome for r in recs] == ["ok", "ok"]
    for rec in recs:
        assert rec.tags["profile"] == "failed" and rec.tags["profile_reason"].startswith("worker killed by SIGSEGV")
        assert "training_median_s" in rec.metrics and not any("_time_" in k for k in rec.metrics)


def test_an_interrupted_profile_keeps_every_point_with_its_timings(job, tmp_path, monkeypatch):
    monkeypatch.setattr(unpaired_engine.manager, "run", fake_measure([], profile_fault="worker killed by SIGKILL"))
    monkeypatch.setattr(stopping, "pending", lambda: signal.SIGINT)
    with pytest.raises(stopping.Signalled):
        unpaired_engine.run_job(job, tmp_path)
    kept = [records.Record.load(d) for d in sorted((tmp_path / "points").iterdir())]  # each saved as it ends
    assert len(kept) == 2 and {r.tags["profile"] for r in kept} == {"interrupted"}
    assert all("interrupted by SIGINT" in r.tags["profile_reason"] and r.outcome == "ok" for r in kept)


def test_an_external_runner_is_not_profiled_and_says_why(make_cfg, tmp_path):
    job = preflight.job(preflight.typed(make_cfg(
        "framework=external", "external.name=Reference", f"external.command='{TEMPLATE}'", "model=mlp_relu",
        "batch_size=8", "ops=[inference]", "bench=quick", "profile=true")))
    assert job.workers == 1
    (rec,) = unpaired_engine.run_job(job, tmp_path).records
    assert rec.outcome == "ok" and rec.tags["profile"] == "unavailable"
    assert "nnbench profiles only its own backends" in rec.tags["profile_reason"]


@pytest.mark.slow
def test_a_sweep_logs_the_profile_beside_unchanged_timings(tmp_path, fake_python):
    """Through Hydra, the harness and MLflow with the stand-in worker: what the profiling worker found on disk
    (record-before-profiling.json) has every timing the logged run has; a crashing profiler fails only the profile."""
    r = run(["-m", "framework=jax,torch", "model=mlp_relu", "batch_size=8", "ops=[inference]", "bench=quick",
             "profile=true", f"runtime.python={fake_python}"], with_store(tmp_path), FAKE_FAULT="none",
            FAKE_MEDIAN_PER_BATCH="1")
    assert r.returncode == 0, r.stderr[-3000:]
    assert "[4/4, ETA 0:00]" in r.stdout + r.stderr  # per point: its side of the trial, and the profiling worker
    uri = f"sqlite:///{tmp_path}/mlruns/mlflow.db"
    df = runs(uri)
    assert len(df) == 2 and set(df["status"]) == {"FINISHED"} and set(df["tags.profile"]) == {"ok"}
    dirs = sorted(tmp_path.glob("multirun/*/*/0/job-*/points/*"))  # the group's, both measured by job 0
    assert [d.parents[1].name for d in dirs] == ["job-0", "job-1"]
    for d in dirs:  # one profiling worker per job, once the trials were judged and the point saved
        assert (d.parents[1] / "process-profile" / "results.jsonl").exists()
        before = json.loads((d / "profile" / "inference" / "record-before-profiling.json").read_text())
        assert before["tags"]["design"] == "paired" and ("inference_speedup" in before["metrics"]) == ("jax" in d.name)
        logged = MlflowClient(uri).get_run((d / "mlflow_run_id").read_text()).data.metrics
        assert before["metrics"] and {k: logged[k] for k in before["metrics"]} == before["metrics"]
        # the stand-in's op: 1 ms, 0.05 ms in each category but "other", the rest overhead
        assert logged["inference_time_overhead_s"] == pytest.approx(1e-3 - 5e-5 * (len(CATEGORIES) - 1))
    crashed = tmp_path / "crashed"
    crashed.mkdir()
    r = run(["-m", "framework=torch", "model=mlp_relu", "batch_size=8", "ops=[inference]", "bench=quick",
             "profile=true", f"runtime.python={fake_python}"], crashed, FAKE_FAULT="none", FAKE_PROFILE_FAULT="segv")
    assert r.returncode == 0, r.stderr[-3000:]
    df = runs(f"sqlite:///{crashed}/mlruns/mlflow.db")
    assert list(df["status"]) == ["FINISHED"] and list(df["tags.profile"]) == ["failed"]
    assert "SIGSEGV" in df["tags.profile_reason"].iloc[0] and df["metrics.inference_median_s"].notna().all()


@pytest.mark.slow
def test_profiled_sweep_explains_the_gap_in_the_report_and_compare(tmp_path):
    """Both frameworks for real, LeNet at batch 32: per-op category metrics, the traces and programs as artifacts,
    the stacked bars and sentences on the parent run, and the same from `nnbench compare --profile`. On the brief
    budget: what it reads is the profile, not the timings."""
    r = run(["-m", "framework=jax,torch", "model=lenet", "batch_size=32", *BRIEF, "profile=true"], with_store(tmp_path))
    assert r.returncode == 0, r.stderr[-3000:]
    uri = f"sqlite:///{tmp_path}/mlruns/mlflow.db"
    df, client = runs(uri), MlflowClient(uri)
    assert len(df) == 2 and set(df["tags.profile"]) == {"ok"} and set(df["tags.design"]) == {"paired"}
    jax = df[df["params.framework"] == "jax"]
    assert jax["metrics.inference_speedup"].notna().all() and jax["metrics.training_speedup"].notna().all()
    assert len(list(tmp_path.glob("multirun/*/*/0/job-*/process-profile"))) == 2  # one per job, after the trials
    for _, run_ in df.iterrows():
        for op in ("inference", "training"):
            parts = [run_[f"metrics.{op}_time_{p}_s"] for p in ("conv", "pool", "overhead")]
            assert min(parts) >= 0 and parts[0] > 0
            files = {a.path for a in client.list_artifacts(run_.run_id, f"profile/{op}")}
            assert {f"profile/{op}/trace.json.gz", f"profile/{op}/top.md"} <= files
            assert (f"profile/{op}/program.txt" in files) == (run_["params.framework"] == "jax")
    (parent,) = runs(uri, parents=True)["run_id"]
    arts = {a.path for a in client.list_artifacts(parent)}
    assert {"breakdown_lenet_training_bs32.png", "breakdown_lenet_inference_bs32.png", "breakdown.csv"} <= arts
    report = open(client.download_artifacts(parent, "report.md", str(tmp_path))).read()
    assert "torch-eager vs jax-jit, lenet training bs32: " in report
    b = pd.read_csv(client.download_artifacts(parent, "breakdown.csv", str(tmp_path)))
    assert list(b["variant"][:2]) == ["torch-eager fp32", "jax-jit fp32"]  # the baseline first
    c = nnbench("compare", ["model=lenet", "--profile", "--out", str(tmp_path / "rep")], tmp_path)
    assert c.returncode == 0, c.stderr
    assert "torch-eager vs jax-jit, lenet inference bs32: " in c.stdout and "overhead" in c.stdout
    assert (tmp_path / "rep" / "breakdown_lenet_training_bs32.png").exists()
    along = nnbench("history", ["model=lenet", "--by", "jax_version"], tmp_path)  # one jax version: no history
    assert along.returncode == 2 and along.stderr.count("\n") == 1 and "jax_version" in along.stderr

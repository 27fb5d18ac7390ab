"""The measuring child: a crash, a kill or a hang fails only its point, and the job goes on."""
import json
import os
import stat
import sys
import textwrap
import time

import pytest

from experiments import job

FAKE = textwrap.dedent("""\
    #!{python}
    # Stand-in interpreter: answers probes; measures one point per start, then misbehaves as told.
    import json, os, signal, sys, time
    args = sys.argv[1:]
    if "--probe" in args:
        print("cpu"); sys.exit(0)
    spec = json.load(open(args[2]))
    fault = os.environ["FAKE_FAULT"]
    if fault not in ("hang", "early"):
        p = spec["points"][0]
        line = {{"batch_size": p["batch_size"], "device": "cpu", "environment": {{"torch_version": "0.fake"}},
                "ops": {{op: {{"status": "ok", "device": "cpu", "block": 1, "stop_reason": "ci",
                             "samples_s": [0.001] * 6,
                             "stats": {{"median_s": 0.001, "p25_s": 0.001, "p75_s": 0.001, "ci95_low_s": 0.001,
                                       "ci95_high_s": 0.001, "min_s": 0.001, "mean_s": 0.001, "std_s": 0.0,
                                       "n_samples": 6, "first_call_s": 0.01,
                                       "throughput_samples_per_s": 1000.0 * p["batch_size"]}}}}
                        for op in p["ops"]}}}}
        open(args[3], "a").write(json.dumps(line) + "\\n")
    print("about to fail:", fault, flush=True)
    if fault in ("segv", "early"):
        os.kill(os.getpid(), signal.SIGSEGV)
    if fault == "oom":
        os.kill(os.getpid(), signal.SIGKILL)
    if fault == "raise":
        raise RuntimeError("CUDA error: out of memory")
    time.sleep(120)
""")


@pytest.fixture
def fake_python(tmp_path):
    path = tmp_path / "fake-python"
    path.write_text(FAKE.format(python=sys.executable))
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def spec(n_points):
    return {"framework": "torch", "points": [{"batch_size": 2 ** i, "ops": ["inference"]} for i in range(n_points)]}


@pytest.mark.parametrize("fault,reason", [
    ("segv", "child killed by SIGSEGV"),
    ("oom", "child killed by SIGKILL (likely out of memory)"),
    ("raise", "child exited with code 1"),
])
def test_crash_fails_only_its_point(tmp_path, fake_python, monkeypatch, fault, reason):
    monkeypatch.setenv("FAKE_FAULT", fault)
    out = job.run_child(spec(4), tmp_path, timeout_s=60, python=fake_python)
    # each child measures one point, then dies in the next: ok, failed, ok, failed
    assert [r["batch_size"] for r in out] == [1, 2, 4, 8]
    assert ["failed" in r for r in out] == [False, True, False, True]
    assert out[1]["failed"].startswith(reason)
    assert "about to fail" in out[1]["stderr_tail"]
    if fault == "raise":
        assert "CUDA error: out of memory" in out[1]["stderr_tail"]


def test_hang_times_out_per_point(tmp_path, fake_python, monkeypatch):
    monkeypatch.setenv("FAKE_FAULT", "hang")
    t0 = time.monotonic()
    out = job.run_child(spec(2), tmp_path, timeout_s=1.5, python=fake_python)
    assert all(r["failed"].startswith("timed out") for r in out)
    assert time.monotonic() - t0 < 20


def test_failed_point_becomes_a_failed_record(tmp_path, fake_python, monkeypatch, make_cfg):
    monkeypatch.setenv("FAKE_FAULT", "segv")
    cfg = make_cfg("framework=torch", "model=lenet", "bench=quick", f"runtime.python={fake_python}")
    recs = job.run_job(cfg, tmp_path / "job")
    assert [r.outcome for r in recs] == ["ok", "failed", "ok", "failed"]
    failed = recs[1]
    assert failed.status == "FAILED" and "SIGSEGV" in failed.tags["failure_reason"]
    assert "about to fail" in failed.files["stderr.txt"]
    ok = recs[0]
    assert ok.status == "FINISHED" and ok.metrics["inference_median_s"] == 0.001
    assert ok.tags["torch_version"] == "0.fake"  # versions come from the child, not this process
    saved = sorted(p.name for p in (tmp_path / "job" / "points").iterdir())
    assert saved == sorted(r.slug for r in recs)  # on disk before anything is logged
    assert json.loads((tmp_path / "job" / "points" / ok.slug / "samples.json").read_text())["inference"]["samples_s"]

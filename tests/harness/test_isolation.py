"""The worker: a crash, a kill or a hang fails only its point, and the job goes on; paired, only its side's point,
and the cell's other variants are measured all the same."""
import json
import time

import pytest

from experiments.harness import manager
from experiments.sweep import preflight, unpaired_engine
from experiments.common.protocol import Point, Request, Setup
from tests.helpers import budget
from tests.helpers.faults import processes_under
from tests.helpers.groups import measured_together


def request(n_points: int) -> Request:
    return Request("torch", Setup("fp32", "cpu"), {"name": "lenet"}, 0, budget("quick"),
                   tuple(Point(2 ** i, ("inference",)) for i in range(n_points)))


@pytest.mark.parametrize("fault,reason", [
    ("segv", "worker killed by SIGSEGV"),
    ("oom", "worker killed by SIGKILL (likely out of memory)"),
    ("raise", "worker exited with code 1: RuntimeError: CUDA error: out of memory"),
])
def test_crash_fails_only_its_point(tmp_path, fake_python, monkeypatch, fault, reason):
    monkeypatch.setenv("FAKE_FAULT", fault)
    out = manager.run(request(4), tmp_path, timeout_s=60, launcher=manager.Launcher(fake_python))
    # each worker measures one point, then dies in the next: ok, failed, ok, failed
    assert [r.batch_size for r in out] == [1, 2, 4, 8]
    assert [r.failure is not None for r in out] == [False, True, False, True]
    assert out[1].failure.startswith(reason)
    assert "about to fail" in out[1].stderr_tail
    if fault == "raise":
        assert "CUDA error: out of memory" in out[1].stderr_tail


def test_hang_times_out_per_point(tmp_path, fake_python, monkeypatch):
    monkeypatch.setenv("FAKE_FAULT", "hang")
    t0 = time.monotonic()
    out = manager.run(request(2), tmp_path, timeout_s=1.5, launcher=manager.Launcher(fake_python))
    assert all(r.failure.startswith("timed out") for r in out)
    assert time.monotonic() - t0 < 20


def test_failed_point_becomes_a_failed_record(tmp_path, fake_python, monkeypatch, make_cfg):
    monkeypatch.setenv("FAKE_FAULT", "segv")
    cfg = make_cfg("framework=torch", "model=lenet", "bench=quick", f"runtime.python={fake_python}")
    recs = unpaired_engine.run_job(preflight.job(preflight.typed(cfg)), tmp_path / "job").records
    assert [r.outcome for r in recs] == ["ok", "failed", "ok", "failed"]
    failed = recs[1]
    assert failed.status == "FAILED" and "SIGSEGV" in failed.tags["failure_reason"]
    assert "about to fail" in failed.stderr
    ok = recs[0]
    assert ok.status == "FINISHED" and ok.metrics["inference_median_s"] == 0.001
    assert ok.tags["torch_version"] == "0.fake"  # versions come from the worker, not this process
    saved = sorted(p.name for p in (tmp_path / "job" / "points").iterdir())
    assert saved == sorted(r.slug for r in recs)  # on disk before anything is logged
    assert json.loads((tmp_path / "job" / "points" / ok.slug / "samples.json").read_text())["inference"]["samples_s"]
    assert (tmp_path / "job" / "points" / failed.slug / "stderr.txt").read_text() == failed.stderr


def test_new_lines_leave_a_partial_last_line_for_the_next_poll(tmp_path):
    """The worker may be halfway through writing a line when the job polls: only complete lines are taken."""
    path = tmp_path / "results.jsonl"
    path.write_bytes(b'{"a": 1}\n{"b": 2}\n{"c": ')
    lines, offset = manager.new_lines(path, 0)
    assert lines == ['{"a": 1}', '{"b": 2}'] and offset == len(b'{"a": 1}\n{"b": 2}\n')
    assert manager.new_lines(path, offset) == ([], offset)
    with open(path, "ab") as f:
        f.write(b'3}\n')
    assert manager.new_lines(path, offset) == (['{"c": 3}'], path.stat().st_size)
    assert manager.new_lines(tmp_path / "missing.jsonl", 0) == ([], 0)


@pytest.mark.parametrize("fault,reason", [
    ("segv", "worker A killed by SIGSEGV"),
    ("oom", "worker A killed by SIGKILL (likely out of memory)"),
    ("raise", "worker A exited with code 1: RuntimeError: CUDA error: out of memory"),
    ("hang", "worker A gave no answer within 2 s"),
])
def test_a_fault_on_a_cell_fails_only_its_sides_point(tmp_path, fake_python, monkeypatch, make_cfg, fault, reason):
    """LeNet bs2 paired, jax against torch: jax's worker fails as it prepares training, its second cell (a hang: as
    it prepares each cell, until bench.timeout_s). jax's point is FAILED with the reason; torch's is measured on
    both cells, the failed one in a trial of its own; no worker is left."""
    monkeypatch.setenv("FAKE_FAULT", fault)
    monkeypatch.setenv("FAKE_FAULT_SIDE", "jax")
    jobs = [preflight.job(preflight.typed(make_cfg(f"framework={fw}", "model=lenet", "batch_size=2", "bench=quick",
                                                   "bench.timeout_s=2", f"runtime.python={fake_python}")))
            for fw in ("jax", "torch")]
    (jax,), (torch,) = (k.records for k in measured_together(jobs, tmp_path))
    assert jax.outcome == "failed" and jax.status == "FAILED" and jax.tags["failure_reason"].startswith(reason)
    if fault == "raise":
        assert "CUDA error: out of memory" in jax.stderr
    assert torch.outcome == "ok" and torch.metrics["inference_median_s"] == torch.metrics["training_median_s"] == 0.001
    assert torch.tags["paired_baseline"] == "true"
    failed = json.loads((tmp_path / "trials" / "bs2-training" / "trial-0.json").read_text())
    assert failed["failed_side"] == 0 and failed["failure"].startswith(reason) and failed["hung"] == (fault == "hang")
    tries = 2 if fault == "hang" else 1  # a hang gets a fresh worker once more; a crash doesn't
    again = json.loads((tmp_path / "trials" / "bs2-training" / f"trial-{tries}.json").read_text())
    assert again["failure"] is None and again["turns"][0]["prepared"] is None  # jax sat it out
    assert not processes_under(tmp_path)


def test_a_worker_that_hung_once_is_replaced_and_its_point_measured(tmp_path, fake_python, monkeypatch, make_cfg):
    """jax's first worker falls silent preparing its first cell (as XLA's compiler did at random on a TPU): killed
    after bench.timeout_s, that trial kept on disk with the hang, and a fresh worker measures the cell: every point
    FINISHED, no worker left."""
    monkeypatch.setenv("FAKE_FAULT", "hang-once")
    monkeypatch.setenv("FAKE_FAULT_SIDE", "jax")
    monkeypatch.setenv("FAKE_ONCE", str(tmp_path / "hung"))
    jobs = [preflight.job(preflight.typed(make_cfg(f"framework={fw}", "model=lenet", "batch_size=2", "bench=quick",
                                                   "bench.timeout_s=2", f"runtime.python={fake_python}")))
            for fw in ("jax", "torch")]
    (jax,), (torch,) = (k.records for k in measured_together(jobs, tmp_path))
    assert jax.outcome == torch.outcome == "ok" and jax.metrics["inference_median_s"] == 0.001
    trials = [json.loads(p.read_text()) for p in sorted((tmp_path / "trials").glob("bs2-*/trial-*.json"))]
    hung = [t for t in trials if t["failure"]]
    assert len(hung) == 1 and hung[0]["hung"] and hung[0]["failure"].startswith("worker A gave no answer within 2 s")
    assert sum(t["turns"][0]["prepared"] is not None for t in trials if t["failure"] is None) >= 2  # both cells
    assert not processes_under(tmp_path)

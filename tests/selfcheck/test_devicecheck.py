"""The accelerator check: says plainly when the machine has none; judges each point run by where it ran and how it
was timed; on a TPU or a GPU, every run of its sweeps is where it should be (tpu, gpu: skipped elsewhere)."""
import json
import math
import subprocess
import sys

import pandas as pd
import pytest

from experiments.common.config import ROOT
from experiments.common.devices import Present
from experiments.selfcheck import devicecheck
from tests.helpers import nnbench


@pytest.mark.skipif(bool(devicecheck.present().tpus or devicecheck.present().gpu), reason="an accelerator is here")
def test_without_an_accelerator_it_runs_nothing_and_says_so(tmp_path):
    r = nnbench("devicecheck", ["--out", str(tmp_path)], tmp_path)
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        "nnbench devicecheck: error: this machine has no accelerator (no TPU on the PCI bus, no NVIDIA device node): "
        "nothing was run; run it on a TPU VM or a GPU machine"]
    assert not list(tmp_path.iterdir())


def test_without_the_accelerator_asked_for_it_names_where_to_run_it(monkeypatch):
    monkeypatch.setattr(devicecheck, "present", lambda: Present(()))
    with pytest.raises(devicecheck.BadInput, match="^this machine has no TPU on the PCI bus: .* run it on a TPU VM$"):
        devicecheck.accelerator("tpu")


def test_beside_a_tpu_jax_takes_the_chip_and_torch_the_hosts_cpu(monkeypatch):
    monkeypatch.setattr(devicecheck, "present", lambda: Present(("TPU v5 lite",)))
    assert devicecheck.accelerator("auto") == devicecheck.accelerator("tpu") == "tpu"
    with pytest.raises(devicecheck.BadInput, match="^this machine has no NVIDIA GPU.* with an NVIDIA GPU$"):
        devicecheck.accelerator("gpu")  # gpucheck's
    assert devicecheck.overrides("readme", "tpu", "quick")[-1] == "device=auto"
    assert devicecheck.overrides("seed004", "tpu", "quick")[-2:] == ["framework=jax", "device=tpu"]
    assert devicecheck.overrides("readme", "gpu", "quick")[-1] == "device=gpu"


def row(name, framework, device, sync, asked="auto", status="FINISHED", mfu=0.5, memory=1.0):
    return {"tags.mlflow.runName": name, "params.framework": framework, "params.device": device, "status": status,
            "params.sync": sync, "params.config.bench.sync": asked, "inference_mfu": mfu,
            "inference_device_peak_mem_bytes": memory}


def test_each_point_is_judged_by_where_it_ran_how_it_was_timed_and_its_mfu():
    fine = [row("a", "jax", "tpu:0", "pipelined"), row("b", "torch", "cpu", "synced", memory=math.nan),
            row("c", "jax", "tpu:0", "synced", asked="synced")]
    assert devicecheck.problems(pd.DataFrame(fine), "tpu") == []
    wrong = [row("d", "jax", "cpu", "synced"), row("e", "jax", "tpu:0", "pipelined", mfu=1.2),
             row("f", "jax", "tpu:0", "pipelined", memory=math.nan), row("g", "torch", "cpu", "x", status="FAILED")]
    assert devicecheck.problems(pd.DataFrame(wrong), "tpu") == [
        "NOT ON THE TPU: d ran on cpu", "TIMED synced, NOT pipelined: d",
        "MFU ABOVE 100%: e inference_mfu", "NO DEVICE MEMORY: f", "FAILED: g: "]


@pytest.mark.tpu
@pytest.mark.slow
def test_the_readme_cell_runs_on_the_tpu_synced_and_pipelined(tmp_path):
    r = nnbench("devicecheck", ["--device", "tpu", "--only", "readme", "--out", str(tmp_path)], tmp_path)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "1 of 1 sweeps on the TPU finished every point where it should run" in r.stdout


@pytest.mark.gpu
@pytest.mark.slow
def test_readme_sweep_runs_on_the_gpu(tmp_path):
    r = nnbench("gpucheck", ["--only", "readme", "--out", str(tmp_path)], tmp_path)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "1 of 1 sweeps on the GPU finished every point where it should run" in r.stdout


@pytest.mark.slow
def test_the_bare_loop_times_each_op_as_asked_with_nothing_around_it(tmp_path):
    """The loop devicecheck holds a sweep's medians against: one line per op and sync, with the block it was given."""
    r = subprocess.run([sys.executable, "-m", "experiments.selfcheck.bareloop", "jax", "cpu", "mlp_relu", "2",
                        "inference:synced:4", "training:pipelined:3"], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-2000:]
    lines = [json.loads(line) for line in r.stdout.splitlines()]
    assert [(d["op"], d["sync"], d["block"]) for d in lines] == [("inference", "synced", 4), ("training", "pipelined", 3)]
    assert all(0 < d["median_s"] < 1 for d in lines)

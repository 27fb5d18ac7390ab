"""`nnbench overhead`'s arithmetic and its bare loop, in-process: a sweep's wall time split into parts that add up to
it; the bare loop is the per-call time of what it is handed, synced each call. (`gpucheck` is devicecheck's GPU
door: without a GPU it is one line, before anything runs.)"""
import argparse

import pytest

from experiments.common.devices import Present
from experiments.common.errors import BadInput
from experiments.selfcheck import devicecheck, gpucheck, overhead
from experiments.sweep.points import JobTimes


def test_the_parts_add_up_to_the_wall_time():
    jobs = [JobTimes(10.0, 8.0, 2, op_points=4, server_s=0.5, startup_s=0.5, first_calls_s=1.0, warmup_s=0.5,
                     sampling_s=5.0, logging_s=1.0) for _ in range(2)]
    parts = dict(overhead.breakdown(25.0, jobs, min_time_s=0.5))
    assert sum(parts.values()) == pytest.approx(25.0)
    assert parts["sampling, the floor (ops × processes × min_time_s)"] == 4.0  # 8 op-points of 0.5 s
    assert parts["sampling past the floor"] == 6.0
    assert parts["the sweep outside its jobs (Hydra, checks, the store, the report)"] == 5.0


def test_the_bare_loop_syncs_every_call():
    synced = []
    per_call = overhead.bare_loop(lambda: 7, synced.append, 5)
    assert synced == [7] * 5 and per_call > 0


def test_gpucheck_is_devicecheck_on_a_gpu(monkeypatch):
    p = argparse.ArgumentParser()
    gpucheck.add_arguments(p)
    a = p.parse_args([])
    assert a.device == "gpu" and a.bench == "quick"
    monkeypatch.setattr(devicecheck, "present", lambda: Present(("TPU v5 lite",)))  # a TPU, no GPU
    with pytest.raises(BadInput, match="^this machine has no NVIDIA GPU"):
        gpucheck.run(a)

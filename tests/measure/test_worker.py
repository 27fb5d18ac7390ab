"""The worker on real frameworks: what it imports, what it records, and the first call; and a paired worker's side
of the socket: ready, cells prepared in turn (the one before freed), bursts, an op it can't run, the end."""
import dataclasses
import os
import shutil
import socket
import subprocess
import sys
import tempfile

import psutil
import pytest

from experiments.harness import manager
from experiments.common.protocol import Burst, Command, Point, PointResult, Prepared, Ready, Request, Setup
from tests.helpers import FORMAT, ROOT, budget

REQUEST = Request("jax", Setup("fp32", "auto", compile=True, memory_format="nhwc"), {"name": "lenet"}, 0,
                  budget("quick", warmup_s=0.02, max_time_s=0.2), (Point(2, ("inference", "training")),))
OTHER = {"jax": "torch", "torch": "jax"}


@pytest.mark.slow
@pytest.mark.parametrize("framework", ["jax", "torch"])
def test_worker_imports_only_its_framework_and_records_its_versions(tmp_path, framework):
    setup = Setup("fp32", "auto", compile=framework == "jax", memory_format=FORMAT[framework])
    req = dataclasses.replace(REQUEST, framework=framework, setup=setup)
    (tmp_path / "request.json").write_text(req.to_json())
    out = tmp_path / "results.jsonl"
    probe = (f"import runpy, sys; sys.argv = ['worker', {str(tmp_path / 'request.json')!r}, {str(out)!r}]\n"
             "try:\n    runpy.run_module('experiments.measure.worker', run_name='__main__')\n"
             "except SystemExit:\n    pass\n"
             "print(sorted(m for m in ('jax', 'torch', 'mlflow', 'hydra', 'pandas') if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, env=manager.environ(), capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip().splitlines()[-1] == str([framework])
    (line,) = [PointResult.from_json(s) for s in out.read_text().splitlines()]
    env = line.environment
    mod = __import__(framework)
    assert env[f"{framework}_version"] == mod.__version__ and f"{OTHER[framework]}_version" not in env
    assert line.device == "cpu" and env["precision_policy"] == "fp32/tf32-off"
    assert env["sync_policy"] == "synced"  # bench.sync=auto on the CPU: each call synced, as before
    for op in ("inference", "training"):
        r = line.ops[op]
        assert r.status == "ok" and r.device == "cpu" and r.stats.n_samples == len(r.measurement.samples_s)
        assert r.stats.ci95_low_s <= r.stats.median_s <= r.stats.ci95_high_s
        assert r.metrics()["calls_per_block"] == r.measurement.block >= 1
    if framework == "jax":  # the first call holds the trace and compile: with jit it is far slower than a steady call
        stats = line.ops["training"].stats
        assert stats.first_call_s > 10 * stats.median_s


BIG = 1 << 20  # rows of matmul_chain's input (n=16, fp32): 64 MiB, which the allocator maps and unmaps whole


@pytest.fixture
def listener():
    """A socket a paired worker connects to (in a short private dir: a socket's path is under 108 bytes)."""
    home = tempfile.mkdtemp(prefix="nnbench-worker-")
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(os.path.join(home, "s"))
    s.listen(1)
    s.settimeout(120)
    yield s
    s.close()
    shutil.rmtree(home)


@pytest.mark.slow
def test_a_paired_worker_prepares_cells_in_turn_and_frees_the_one_before(tmp_path, listener):
    """torch matmul_chain: the worker says it is ready (its threads and cores), prepares a 64 MiB cell and bursts
    it, then prepares a small one, by then holding the big one's memory no more; an op it can't run is prepared as
    skipped with the reason; it ends when told, writing no results file."""
    req = Request("torch", Setup("fp32", "cpu"), {"name": "matmul_chain", "n": 16, "m": 4, "depth": 1}, 0,
                  budget("quick", warmup_s=0.01, warmup_calls=2), (Point(2, ("inference",)),),
                  paired=listener.getsockname())
    (tmp_path / "request.json").write_text(req.to_json())
    worker = manager.Spawned(sys.executable, manager.environ(), tmp_path / "request.json", tmp_path / "results.jsonl",
                             tmp_path / "worker.log")
    try:
        conn, _ = listener.accept()
        answers = conn.makefile("rb")

        def ask(command: Command) -> bytes:
            conn.sendall(command.to_json().encode() + b"\n")
            return answers.readline()

        ready = Ready.from_json(answers.readline())
        big = Prepared.from_json(ask(Command("prepare", batch_size=BIG, op="inference")))
        held = psutil.Process(worker.pid).memory_info().rss
        burst = Burst.from_json(ask(Command("burst", 0.02)))
        small = Prepared.from_json(ask(Command("prepare", batch_size=2, op="inference")))
        freed = held - psutil.Process(worker.pid).memory_info().rss
        bursts = [Burst.from_json(ask(Command("burst", 0.02))) for _ in range(2)]
        skipped = Prepared.from_json(ask(Command("prepare", batch_size=2, op="training")))
        conn.sendall(Command("end").to_json().encode() + b"\n")
        assert worker.wait(60) == 0, (tmp_path / "worker.log").read_text()[-2000:]
    finally:
        worker.kill()
    assert ready.environment["torch_version"] and ready.threads == int(ready.environment["torch_num_threads"])
    assert ready.cores == len(os.sched_getaffinity(0)) and ready.startup_s > 0
    for p in (big, small):
        assert p.status == "ok" and p.device == "cpu" and p.block >= 1 and p.first_call_s > 0 and p.compiles is None
    assert big.flops == small.flops * BIG // 2 and big.peak_mem_bytes > BIG * 16 * 4
    assert freed > 0.75 * BIG * 16 * 4, (held, freed)  # the big cell's input and model went with it
    assert burst.samples_s and burst.meter["wall_s"] > 0 and burst.compiles is None
    assert all(b.samples_s and max(b.samples_s) < min(burst.samples_s) for b in bursts)  # the small cell's calls
    assert skipped.status == "skipped" and skipped.reason.startswith("matmul_chain has constant weights")
    assert not (tmp_path / "results.jsonl").exists()


class FakeAccelerator:
    """A backend whose device reports its peak bytes in use, and whose op is a no-op that lives on `tpu:0`."""

    def reset_peak_memory(self):
        pass

    def prepare(self, spec, op, batch, seed):
        from experiments.measure.backends import Step  # the worker's own types; no framework

        return Step(lambda: "out", lambda out: None, lambda out: "tpu:0")

    def cache_hits(self):
        return 0

    def peak_memory(self):
        return 3 << 20


def test_an_op_records_the_devices_peak_memory_beside_the_hosts():
    import models  # the declared LeNet: its FLOPs are counted from its layers
    from experiments.measure import worker

    req = dataclasses.replace(REQUEST, budget=budget("quick", warmup_s=0.0, min_time_s=0.0, max_time_s=0.01))
    bench = worker.Workbench(FakeAccelerator(), models.load("lenet"), req, "tpu:0")
    r = worker.measure_op(bench, "inference", 2, threads=1)
    assert r.device == "tpu:0" and r.device_peak_mem_bytes == 3 << 20 and r.peak_mem_bytes >= 0
    assert r.metrics()["device_peak_mem_bytes"] == 3 << 20 and "peak_mem_bytes" in r.metrics()


def test_a_paired_op_is_built_after_memory_sized_by_its_layout():
    """A forked worker starts from its fork server's memory image: the layout the parent draws for each cell moves
    the heap (16-byte steps) and the address space after it (whole pages), so that a large buffer made next (64 MiB:
    above any threshold at which glibc would take it from the heap) lands elsewhere from one layout to another, and
    in the same place for the same layout (in a fresh interpreter, as a worker is: this one's freed gaps would take
    the buffer wherever they are)."""
    import mmap

    from experiments.measure.worker import shifted

    heap, space = shifted(5 + 4096 * 7)
    assert len(heap) == 80 and len(space) == 8 * mmap.PAGESIZE
    assert [len(x) for x in shifted(0)] == [0, mmap.PAGESIZE]
    probe = ("import numpy as np; from experiments.measure.worker import shifted\n"
             "def landing(layout):\n    held = shifted(layout)\n    return np.empty(1 << 26, np.uint8).ctypes.data\n"
             "print(landing(4096 * 100), landing(4096 * 900), landing(4096 * 100))")
    a, b, again = map(int, subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True,
                                          check=True).stdout.split())
    assert a != b and a == again and abs(a - b) % mmap.PAGESIZE == 0  # moved by whole pages

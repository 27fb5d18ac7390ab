"""framework.threads reaches each framework: torch's intra-op threads, and XLA's CPU pool through the cores a jax
worker may run on (XLA's own thread flags changed nothing in jaxlib 0.10.2); a worker records the threads per op."""
import os
import subprocess
import sys

import pytest

import models
from experiments.common.protocol import Point, Request, Setup
from experiments.harness import manager
from experiments.measure import worker
from experiments.measure.backends import Unavailable, load
from tests.helpers import ROOT, budget

# Ticks of CPU time per thread of a process that pins itself as a jax worker would, then runs a jitted matmul and
# conv for half a second.
BUSY = """
import os, sys, time
from experiments.measure import worker
worker.pin("jax", int(sys.argv[1]) or None)
import jax, jax.numpy as jnp
a, x, w = jnp.ones((800, 800)), jnp.ones((64, 28, 28, 16)), jnp.ones((5, 5, 16, 16))
f = jax.jit(lambda a, x, w: (a @ a, jax.lax.conv_general_dilated(x, w, (1, 1), "SAME",
                                                                dimension_numbers=("NHWC", "HWIO", "NHWC"))))
jax.block_until_ready(f(a, x, w))
def ticks():
    out = {}
    for t in os.listdir("/proc/self/task"):
        f_ = open(f"/proc/self/task/{t}/stat").read().rsplit(")", 1)[1].split()
        out[t] = int(f_[11]) + int(f_[12])
    return out
before, t0 = ticks(), time.perf_counter()
while time.perf_counter() - t0 < 0.5:
    jax.block_until_ready(f(a, x, w))
after = ticks()
print(sorted((after[t] - before.get(t, 0) for t in after), reverse=True))
"""


@pytest.mark.slow
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores to tell one thread from several")
def test_one_jax_thread_runs_xla_on_one_thread():
    """Pinned to one core, one thread does (nearly) all of XLA's work; left alone, several share it."""
    shares = {}
    for threads in (1, 0):
        r = subprocess.run([sys.executable, "-c", BUSY, str(threads)], cwd=ROOT, capture_output=True, text=True,
                           env=manager.environ(), timeout=120)
        assert r.returncode == 0, r.stderr[-2000:]
        busy = eval(r.stdout.strip().splitlines()[-1])
        shares[threads] = busy[0] / sum(busy)
    assert shares[1] >= 0.9 and shares[0] < 0.9, shares


def test_a_thread_count_a_framework_cannot_run_is_one_line_naming_the_fix():
    with pytest.raises(Unavailable, match=r"framework.threads=0: give a positive count, or null"):
        load("torch").configure(Setup("fp32", "cpu", threads=0))
    cores = len(os.sched_getaffinity(0))
    with pytest.raises(Unavailable, match=rf"framework.threads={cores + 1}: XLA runs one CPU thread per core the "
                                          rf"worker may use \(here {cores}\): give 1 to that, or null"):
        load("jax").configure(Setup("fp32", "cpu", compile=True, memory_format="nhwc", threads=cores + 1))


def test_a_worker_records_the_threads_each_op_ran():
    """In this process (torch's thread count restored after): an op measured with framework.threads=1 records one
    thread, and is oversubscribed only where other programs left less than that one thread's core free."""
    import torch  # the backend's framework, here to restore its global thread count

    before = torch.get_num_threads()
    backend = load("torch")
    try:
        setup = Setup("fp32", "cpu", memory_format="contiguous", threads=1)
        backend.configure(setup)
        req = Request("torch", setup, {"name": "mlp_relu"}, 0, budget("quick", warmup_s=0.01, max_time_s=0.05),
                      (Point(2, ("inference",)),))
        threads = worker.intra_op_threads(worker.environment(backend, setup))
        op = worker.measure_op(worker.Workbench(backend, models.load("mlp_relu"), req, "cpu"), "inference", 2, threads)
    finally:
        torch.set_num_threads(before)
    assert threads == 1 and op.threads == 1 and op.metrics()["threads"] == 1
    assert (op.oversubscribed is None) == (1 <= min(worker.cores(), os.cpu_count() - op.background_cores) + 0.2)

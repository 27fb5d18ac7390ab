"""Shared fixtures: composing the real config, a misbehaving stand-in interpreter, and skipping GPU tests."""
import collections
import os
import shutil
import subprocess

import pytest
from hydra import compose, initialize_config_dir

# torch.compile compiles its kernels in this process, not in a pool of fresh interpreters it would start in every
# process that compiles (each importing torch: seconds of CPU on a machine the suite keeps busy). Set before
# tests.forked records the session's environment, so the commands and workers the suite starts inherit it.
os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
# torch's OpenMP threads sleep as they wait for work instead of spinning: the suite's processes always share the
# cores, and a spinning thread burns the CPU another process's work waits for. What a test reads is a behaviour or a
# ratio measured side by side, never a time a spinning pool would shorten.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
# XLA's CPU backend compiles the suite's programs without LLVM's optimizations: every HLO pass still runs (what the
# programs are, their FLOP counts, how often they compile), only the machine code is left slower, and each of the
# suite's hundreds of small programs compiles in less CPU (the jax tests of tests/measure and tests/models: a fifth).
os.environ.setdefault("XLA_FLAGS", "--xla_backend_optimization_level=0")
# Likewise inductor's C++ kernels are compiled as plain loops, without SIMD: every graph, fusion and kernel is still
# made (how often a step compiles, its kernels in a profile), only the machine code is slower, and each of the suite's
# torch.compile graphs compiles in about a quarter less CPU (its kernels' compiles are most of it).
os.environ.setdefault("TORCHINDUCTOR_VEC_ISA_OK", "0")

import models
from experiments.common.config import register
from experiments.common.devices import present
from tests.helpers import ROOT, fake_interpreter, unavailable

register()


@pytest.fixture
def make_cfg():
    """Compose the real config with overrides, as `python -m experiments.run` would (hydra=True: with its node)."""
    def _compose(*overrides: str, hydra: bool = False):
        with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
            return compose(config_name="config", overrides=list(overrides), return_hydra_config=hydra)
    return _compose


@pytest.fixture
def fake_python(tmp_path):
    """An executable that stands in for a venv's python and runs tests/helpers/fake_worker.py (FAKE_FAULT)."""
    return fake_interpreter(tmp_path)


@pytest.fixture(scope="session")
def slurm():
    """The single-node cluster of tests/cluster/slurm.sh (brought up here if it is down: `up` is idempotent)."""
    if os.geteuid() != 0 and not shutil.which("sbatch"):
        unavailable("SLURM", "not root and no sbatch on PATH")
    r = subprocess.run(["bash", str(ROOT / "tests" / "cluster" / "slurm.sh"), "up"], capture_output=True, text=True,
                       timeout=600)
    if r.returncode:
        unavailable("SLURM", f"slurm.sh up failed: {r.stderr.strip().splitlines()[-1:]}")
    return True


def _gpu_visible() -> bool:
    try:
        import torch
        return torch.cuda.is_available()
    except ImportError:
        return False


# The fast tier (`-m "not slow"`) runs each per-model check of the frameworks (tests/measure: ops, FLOPs, parity,
# profiles, compiling once) on these models; every other built-in model's cases are in the slow tier.
FAST_MODELS = ("lenet", "mlp_relu")


@pytest.hookimpl(optionalhook=True)  # an xdist hook: the suite also runs without xdist (-p no:xdist)
def pytest_xdist_auto_num_workers(config):
    """`-n auto` (pyproject's addopts): a worker per core for the fast tier, whose tests all compute; one more for
    the full suite, whose workers often wait (on SLURM, a server, a fault's moment). PYTEST_XDIST_AUTO_NUM_WORKERS
    still decides where it is set."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None  # xdist's own hook reads it
    affinity = getattr(os, "sched_getaffinity", None)  # not on macOS
    cores = len(affinity(0)) if affinity else os.cpu_count() or 1
    return cores if "not slow" in (config.option.markexpr or "") else cores + 1


# The directories whose modules run whole sweeps (seconds to minutes each, often waiting on a cluster or a server):
# their modules go first, in this order, so no long module is started last and ends the run alone; the other modules
# follow by their number of tests, the most first (the in-process ones that compute each case, tests/measure's
# profiles among them, take longest). xdist keeps this order (pyproject's --no-loadscope-reorder: its own order, by
# the number of tests alone, put those few-test sweep modules last).
FIRST = ("sweep", "cli", "models")
# The modules whose tests wait on the SLURM cluster most of their time (its scheduling, submitit's polling, a job's
# time limit) start apart, each at the head of one of FIRST's turns, so they run one after another: two workers that
# waited at once left a core idle (a quarter of the cores, for the minute and a half the two overlapped).
CLUSTER = ("tests/sweep/test_cluster.py", "tests/sweep/test_requeue.py", "tests/sweep/test_resume.py")


def pytest_collection_modifyitems(config, items):
    def order(item) -> tuple[int, int]:
        parts = item.nodeid.split("/")
        if module(item) in CLUSTER:
            return CLUSTER.index(module(item)), -1
        if len(parts) > 2 and parts[1] in FIRST:
            return FIRST.index(parts[1]), 0
        return len(FIRST), -sizes[module(item)]

    def module(item) -> str:
        return item.nodeid.split("::")[0]

    sizes = collections.Counter(map(module, items))
    items.sort(key=order)  # stable: each module's tests keep their order
    others = set(models.available()) - set(FAST_MODELS)
    for item in items:
        if getattr(item, "callspec", None) and item.callspec.params.get("name") in others:
            item.add_marker(pytest.mark.slow)
    gpu, tpu = _gpu_visible(), bool(present().tpus)  # the bus, not jax: this process must not open the chip
    for item in items:
        if "gpu" in item.keywords and not gpu:
            item.add_marker(pytest.mark.skip(reason="no CUDA GPU visible"))
        if "tpu" in item.keywords and not tpu:
            item.add_marker(pytest.mark.skip(reason="no TPU on the PCI bus"))

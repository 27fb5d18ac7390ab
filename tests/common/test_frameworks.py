"""The backends' descriptors (`common.frameworks.Traits`): what the parent reads of a framework without importing it."""
import ast
import subprocess
import sys
from pathlib import Path

import yaml

from experiments.common import frameworks
from experiments.common.config import BACKENDS, CONF, backends
from experiments.harness import envs, manager
from tests.helpers import ROOT


def test_every_backend_has_a_descriptor_that_names_it_and_matches_its_conf():
    for name in backends():
        t = frameworks.traits(name)
        conf = yaml.safe_load((CONF / "framework" / f"{name}.yaml").read_text())
        assert t.name == name == conf["name"]
        assert (t.smoke.compile, t.smoke.memory_format) == (conf["compile"], conf["memory_format"]), name
        assert (t.smoke.precision, t.smoke.device) == ("fp32", "cpu")


def test_the_mode_names_are_the_frameworks_own():
    assert [frameworks.traits(n).mode(c) for n in ("jax", "torch") for c in (True, False)] == \
        ["jax-jit", "jax-eager", "torch-compile", "torch-eager"]


def test_what_the_harness_reads_of_the_backends_is_what_it_always_set():
    """The compile caches, companions and held packages, gathered from the descriptors, as they were spelled."""
    d = Path("/c")
    assert manager.cache_environ(d) == {
        "JAX_COMPILATION_CACHE_DIR": "/c/jax", "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
        "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "-1", "TORCHINDUCTOR_CACHE_DIR": "/c/inductor",
        "TORCHINDUCTOR_FX_GRAPH_CACHE": "1", "TORCHINDUCTOR_AUTOGRAD_CACHE": "1"}
    assert manager.cache_environ(None) == {"TORCHINDUCTOR_FX_GRAPH_CACHE": "0", "TORCHINDUCTOR_AUTOGRAD_CACHE": "0",
                                           "JAX_ENABLE_COMPILATION_CACHE": "false"}
    assert envs.COMPANIONS == {"jax": ("jaxlib",)} and envs.HOLD == ("torch", "torchvision", "torchaudio")
    assert envs.Spec((("jax", "0.10.1"),)).requirements == ["jax==0.10.1", "jaxlib==0.10.1"]


def test_a_users_network_is_built_from_its_frameworks_field():
    class Net:
        torch, flax, params = object(), None, {"torch": 5}

    assert [t.name for t in frameworks.declared(Net)] == ["torch"]
    assert frameworks.param_counts(Net) == {"torch": 5}
    assert frameworks.built_with("flax").name == "jax"


def test_a_descriptor_imports_only_the_standard_library_and_the_common_types():
    allowed = {"__future__", "sys", "experiments.common.frameworks", "experiments.common.protocol"}
    for path in sorted(BACKENDS.glob("*_traits.py")):
        tree = ast.parse(path.read_text())
        got = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)} | \
              {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        assert got <= allowed, f"{path.name} imports {sorted(got - allowed)}"


def test_the_parent_reads_every_descriptor_without_a_framework():
    code = ("import sys\nfrom experiments.common import frameworks, job\nfrom experiments.harness import envs\n"
            "print([t.mode(True) for t in frameworks.every()])\n"
            "print(sorted(m for m in ('jax', 'torch', 'flax') if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    modes, imported = r.stdout.splitlines()
    assert "'jax-jit'" in modes and "'torch-compile'" in modes and imported == "[]"

"""Environment record from an allow-list (never a dump of os.environ), and its fingerprint. Worker side (the
harness reads an environment's manifest here too, for a runner in another language)."""
from __future__ import annotations

import functools
import hashlib
import json
import os
import platform
import re
import socket
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import psutil

from experiments.measure.meter import load_average

# Environment variables that change what is measured; nothing else is ever read.
ENVIRON_FLAGS = (
    "XLA_FLAGS", "XLA_PYTHON_CLIENT_PREALLOCATE", "XLA_PYTHON_CLIENT_MEM_FRACTION", "JAX_PLATFORMS",
    "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "CUDA_VISIBLE_DEVICES",
    "TORCHINDUCTOR_MAX_AUTOTUNE", "TORCHINDUCTOR_VEC_ISA_OK", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_",
    "LD_PRELOAD",
)
# Where a scheduler ran the job: recorded, but not part of the fingerprint (another job id is the same environment).
SCHEDULER_VARS = {"SLURM_JOB_ID": "slurm_job_id", "SLURM_ARRAY_JOB_ID": "slurm_array_job_id",
                  "SLURM_ARRAY_TASK_ID": "slurm_array_task_id", "SLURM_JOB_PARTITION": "slurm_partition",
                  "SLURMD_NODENAME": "slurm_node"}
# Keys whose change makes a different environment for the same config point.
FINGERPRINT_KEYS = (
    "python_version", "numpy_version", "jax_version", "jaxlib_version", "flax_version", "optax_version",
    "torch_version", "cuda_version", "cudnn_version", "device_name", "cpu_model", "precision_policy", "allocator",
) + tuple(f"env_{k}" for k in ENVIRON_FLAGS)
# In an environment `nnbench versions` built (harness/envs.py): its spec and what it changed, at its prefix.
ENV_MANIFEST = "nnbench-env.json"


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def host_record() -> dict[str, str]:
    """Facts about this process's interpreter and machine (the worker calls it, so versions are its own)."""
    rec = {
        "python_version": platform.python_version(),
        "python_executable": sys.executable,
        "python_prefix": sys.prefix,  # tells venvs apart: their executables may link to the same binary
        "numpy_version": metadata.version("numpy"),
        "platform": platform.platform(),
        "cpu_model": _cpu_model(),
        "host": socket.gethostname(),
        "allocator": os.environ.get("NNBENCH_ALLOCATOR", "system"),  # runtime.allocator, as the harness set it
    }
    rec.update({f"env_{k}": os.environ[k] for k in ENVIRON_FLAGS if k in os.environ})
    rec.update({tag: os.environ[k] for k, tag in SCHEDULER_VARS.items() if k in os.environ})
    return rec | spec_record(sys.prefix)


def version_key(package: str) -> str:
    """The record's key for a package's version: `jax_version`, `nnbench_planted_version`."""
    return re.sub(r"[-_.]+", "_", package).lower() + "_version"


def spec_record(prefix: str | Path) -> dict[str, str]:
    """What an environment built by `nnbench versions` was built for: `env_spec` (jax==0.10.1), `env_changes` (every
    version that differs from the environment it was built from: `jax 0.10.2→0.10.1; jaxlib 0.10.2→0.10.1`),
    `env_packages` and each such package's version (`<name>_version`, pins included), as its manifest at `prefix`
    says (validated when it was built); {} elsewhere."""
    path = Path(prefix) / ENV_MANIFEST
    if not path.is_file():
        return {}
    m = json.loads(path.read_text())
    versions = {n: v for n, v in m["pins"].items()} | {n: new for n, (_, new) in m["changes"].items() if new}
    changes = "; ".join(f"{n} {old or '(none)'}→{new or '(none)'}" for n, (old, new) in sorted(m["changes"].items()))
    return {"env_spec": m["spec"], "env_changes": changes or "none", "env_packages": " ".join(sorted(versions))} | {
        version_key(n): v for n, v in versions.items()}


def machine_record() -> dict[str, float]:
    """The machine's numeric facts (metrics: the UI sorts and charts them), read when the worker starts."""
    rec = {"cpu_count_logical": psutil.cpu_count(logical=True), "cpu_count_physical": psutil.cpu_count(logical=False),
           "memory_total_bytes": psutil.virtual_memory().total,
           "load_avg_1m": load_average()}  # a busy host explains noisy numbers (None: the machine hides it)
    if hasattr(os, "sched_getaffinity"):
        rec["cpu_affinity"] = len(os.sched_getaffinity(0))  # the cores this process may run on
    return {k: float(v) for k, v in rec.items() if v is not None}


@functools.cache
def suite_record() -> dict[str, str]:
    """The suite's own version: git commit (and whether the tree was dirty) of the code that ran; read once."""
    root = Path(__file__).resolve().parent.parent
    rec = {"nnbench_git_commit": "unknown"}
    try:
        rec["nnbench_git_commit"] = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, check=True, timeout=10
        ).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, timeout=10).stdout.strip()
        rec["nnbench_git_dirty"] = str(bool(dirty)).lower()
    except (OSError, subprocess.SubprocessError):
        pass
    for pkg in ("mlflow", "hydra-core"):
        try:
            rec[f"{pkg.split('-')[0]}_version"] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            pass
    return rec


def spec_versions(record: dict[str, str]) -> dict[str, str]:
    """The versions of the packages an environment's spec pinned or moved, from a record: {`jax_version`: ...}."""
    keys = (version_key(n) for n in record.get("env_packages", "").split())
    return {k: record[k] for k in keys if k in record}


def fingerprint(record: dict[str, str]) -> str:
    """Stable short hash of what makes an environment different (versions, device, policy, flags, and the version
    of every package an environment's spec pinned or moved)."""
    key = {k: record[k] for k in FINGERPRINT_KEYS if k in record} | spec_versions(record)
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]

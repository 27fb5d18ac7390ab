"""Typed config schema (Hydra ConfigStore), so a misspelled key or option fails at composition.

The names every other module uses are defined here once: frameworks (one `<name>_backend.py` each),
ops, and the default report baseline. Hydra is imported only by `register()`, so the worker can import
these names without it.
"""
from __future__ import annotations

import secrets
import shutil
import subprocess
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any, Optional

from omegaconf import MISSING, OmegaConf

from experiments.common.protocol import Budget

ROOT = Path(__file__).resolve().parents[2]  # the suite's checkout (conf/, experiments/, models/)
CONF = ROOT / "conf"
BACKENDS = ROOT / "experiments" / "measure" / "backends"
# The README's sweep: the one spelling the self-checks and the tests use.
README_SWEEP = ("framework=jax,torch", "model=lenet")


def bench_budget(name: str) -> Budget:
    """The timing budget of conf/bench/<name>.yaml, read without Hydra (the self-checks time outside a sweep)."""
    import yaml  # only the self-checks read a bench file directly

    return Budget.of(yaml.safe_load((CONF / "bench" / f"{name}.yaml").read_text()))


def backends() -> list[str]:
    """Frameworks measured in Python, by naming convention: `measure/backends/<name>_backend.py` (not imported)."""
    return sorted(p.stem.removesuffix("_backend") for p in BACKENDS.glob("*_backend.py"))


def frameworks() -> list[str]:
    """The `framework` options: the backends, and `external` (a runner in any language, harness/external.py)."""
    return backends() + ["external"]


Framework = Enum("Framework", {name: name for name in frameworks()})


class Precision(Enum):
    fp32 = "fp32"
    bf16 = "bf16"
    fp16 = "fp16"
    fp64 = "fp64"


class Device(Enum):
    auto = "auto"
    cpu = "cpu"
    gpu = "gpu"


class MemoryFormat(Enum):
    contiguous = "contiguous"  # torch: NCHW, as users write it
    channels_last = "channels_last"  # torch: NHWC strides
    nhwc = "nhwc"  # jax: XLA's own layout for images


CompileMode = Enum("CompileMode", {m: m for m in ("default", "reduce-overhead")})  # torch.compile(mode=...)


# What `runtime.allocator` puts in the worker's environment. glibc gave freed activation memory back to the kernel
# and faulted it in again, depending on the process's history: torch ResNet bs32 inference held 73-77 ms in
# processes taking ~27k minor faults per call and 56.6 ms in one taking 11.5k; with these thresholds, 0 faults
# and 44-45 ms.
ALLOCATORS = {  # runtime.allocator: the worker's environment for it
    # glibc with mmap/trim thresholds that keep freed activations (no fault-driven speed levels)
    "glibc": {"MALLOC_MMAP_THRESHOLD_": str(32 << 20), "MALLOC_TRIM_THRESHOLD_": str(1 << 30)},
    "system": {},  # the environment as it is
    "jemalloc": {"LD_PRELOAD": "libjemalloc.so.2"},  # Debian's libjemalloc2
    "tcmalloc": {"LD_PRELOAD": "libtcmalloc_minimal.so.4"},  # Debian's libtcmalloc-minimal4
}


Allocator = Enum("Allocator", {a: a for a in ALLOCATORS})


class Start(Enum):
    """How a job starts its workers (runtime.start)."""

    fork = "fork"  # from a fork server that imported the framework once per job (measure/server.py)
    spawn = "spawn"  # a fresh interpreter each, importing everything again


class Op(Enum):
    inference = "inference"
    training = "training"
    grad = "grad"


OPS = tuple(op.value for op in Op)
PRECISIONS = tuple(p.value for p in Precision)
DEFAULT_BASELINE = "torch-eager fp32"  # the variant ("<mode> <precision>") speedups are measured against


@dataclass
class FrameworkConf:
    name: Framework = MISSING
    compile: bool = MISSING  # jax: jit (idiomatic default), torch: eager by default
    compile_mode: CompileMode = CompileMode.default  # torch: reduce-overhead adds CUDA graphs (GPUs)
    memory_format: Optional[MemoryFormat] = MISSING  # torch: contiguous or channels_last; jax: nhwc; external: null
    threads: Optional[int] = None  # intra-op threads (torch.set_num_threads; jax: the cores it runs on); null: its own


@dataclass
class PrecisionConf:
    name: Precision = MISSING
    tf32: bool = False  # fp32 matmuls/convs may use TF32 on GPUs only when asked, on both sides


@dataclass
class BenchConf(Budget):
    """The timing budget (its fields are timing.Budget's, set in conf/bench/*.yaml) and the harness's own keys."""

    processes: int = MISSING  # fresh measuring processes per point, interleaved
    machine_check_s: float = MISSING  # the sweep's check of the machine's own noise, before its first job (0: none)
    timeout_s: float = MISSING  # per point, worker start and compile included


@dataclass
class MlflowConf:
    tracking_uri: Optional[str] = None  # null: $MLFLOW_TRACKING_URI, else sqlite:///mlruns/mlflow.db
    experiment_name: str = "nnbench"
    parent_run_id: Optional[str] = None  # a sweep's parent run goes under this run (nnbench versions and bisect)


@dataclass
class RuntimeConf:
    python: Optional[str] = None  # interpreter of the worker; null: the one running the sweep
    allocator: Allocator = Allocator.glibc  # the worker's malloc (recorded as the tag `allocator`)
    start: Start = Start.fork  # fork: import the framework once per job; spawn: once per worker
    compile_cache: bool = True  # a point's later processes load what its first one compiled (the sweep's cache)


@dataclass
class ExternalConf:
    """framework=external: a runner printing seed 000's lines (docs/protocol.md); top-level keys, so that they
    can be set in the same sweep as jax and torch."""

    name: Optional[str] = None  # display name, e.g. Lux: the runs' mode
    command: Optional[str] = None  # template with {model} {precision} {device} {ops} {batch_sizes} {python}


@dataclass
class ReportConf:
    baseline: str = DEFAULT_BASELINE


@dataclass
class Config:
    framework: FrameworkConf = field(default_factory=FrameworkConf)
    model: Any = MISSING  # per-model keys (matmul_chain has n, m, depth); checked by models.load
    precision: PrecisionConf = field(default_factory=PrecisionConf)
    bench: BenchConf = MISSING  # conf/bench/*.yaml sets every key
    batch_size: Optional[int] = None  # null: the model's seed lists per op
    ops: list[Op] = field(default_factory=lambda: [Op.inference, Op.training])
    device: Device = Device.auto
    seed: int = 0
    repeat: int = 0  # replicate index: repeat=0,1,2 measures each point in three fresh processes
    resume: bool = False  # skip points with a FINISHED run of the same config and environment in the store
    profile: bool = False  # one more worker per job profiles each point after its timed ones (docs/measuring.md)
    mlflow: MlflowConf = field(default_factory=MlflowConf)
    runtime: RuntimeConf = field(default_factory=RuntimeConf)
    external: ExternalConf = field(default_factory=ExternalConf)
    report: ReportConf = field(default_factory=ReportConf)


def register() -> None:
    """The schema and the resolvers, for Hydra (the sweep's processes only)."""
    from hydra.core.config_store import ConfigStore  # not at the top: the worker imports these names without Hydra

    ConfigStore.instance().store(name="schema", node=Config)
    OmegaConf.register_new_resolver("nnbench.size", size_for_device, replace=True, use_cache=True)
    OmegaConf.register_new_resolver("nnbench.unique", lambda: UNIQUE, replace=True, use_cache=True)


# `${nnbench.unique:}` in the output dirs: drawn once in the launching process, so two sweeps started in the same
# second get different dirs. Job configs see the same value: Hydra copies the master config's resolver cache into
# each one (load_sweep_config), and that cache is pickled with it for joblib and submitit.
UNIQUE = secrets.token_hex(3)


def size_for_device(device: Device | str, gpu_size: int, cpu_size: int) -> int:
    """`${nnbench.size:${device},GPU,CPU}`: a preset's size where it will run (auto: a GPU if nvidia-smi sees one)."""
    device = getattr(device, "value", device)
    if device == "auto":
        smi = shutil.which("nvidia-smi")
        device = "gpu" if smi and subprocess.run([smi, "-L"], capture_output=True).returncode == 0 else "cpu"
    return gpu_size if device == "gpu" else cpu_size

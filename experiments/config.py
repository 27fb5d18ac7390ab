"""Typed config schema (Hydra ConfigStore), so a misspelled key or option fails at composition."""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, OmegaConf


class Framework(Enum):
    jax = "jax"
    torch = "torch"


class Precision(Enum):
    fp32 = "fp32"
    bf16 = "bf16"
    fp16 = "fp16"
    fp64 = "fp64"


class Device(Enum):
    auto = "auto"
    cpu = "cpu"
    gpu = "gpu"


class Op(Enum):
    inference = "inference"
    training = "training"
    grad = "grad"


@dataclass
class FrameworkConf:
    name: Framework = MISSING
    compile: bool = MISSING  # jax: jit (idiomatic default), torch: eager by default


@dataclass
class PrecisionConf:
    name: Precision = MISSING
    tf32: bool = False  # fp32 matmuls/convs may use TF32 on GPUs only when asked, on both sides


@dataclass
class BenchConf:
    warmup_s: float = 0.2
    warmup_calls: int = 5
    min_samples: int = 10
    max_samples: int = 1000
    max_time_s: float = 5.0
    target_rel_ci: float = 0.02
    min_block_s: float = 0.002
    timeout_s: float = 300.0  # per point, child start and compile included


@dataclass
class MlflowConf:
    tracking_uri: Optional[str] = None  # null: $MLFLOW_TRACKING_URI, else sqlite:///mlruns/mlflow.db
    experiment_name: str = "nnbench"


@dataclass
class RuntimeConf:
    python: Optional[str] = None  # interpreter of the measuring child; null: the one running the sweep


@dataclass
class ReportConf:
    baseline: str = "torch-eager fp32"  # the variant ("<mode> <precision>") speedups are measured against


@dataclass
class Config:
    framework: FrameworkConf = field(default_factory=FrameworkConf)
    model: Any = MISSING  # per-model keys (matmul_chain has n, m, depth); checked by models.load
    precision: PrecisionConf = field(default_factory=PrecisionConf)
    bench: BenchConf = field(default_factory=BenchConf)
    batch_size: Optional[int] = None  # null: the model's seed lists per op
    ops: list[Op] = field(default_factory=lambda: [Op.inference, Op.training])
    device: Device = Device.auto
    seed: int = 0
    repeat: int = 0  # replicate index: repeat=0,1,2 measures each point in three fresh processes
    mlflow: MlflowConf = field(default_factory=MlflowConf)
    runtime: RuntimeConf = field(default_factory=RuntimeConf)
    report: ReportConf = field(default_factory=ReportConf)


def register() -> None:
    ConfigStore.instance().store(name="schema", node=Config)
    OmegaConf.register_new_resolver("nnbench.size", size_for_device, replace=True, use_cache=True)


def size_for_device(device: Device | str, gpu_size: int, cpu_size: int) -> int:
    """`${nnbench.size:${device},GPU,CPU}`: a preset's size where it will run (auto: a GPU if nvidia-smi sees one)."""
    device = getattr(device, "value", device)
    if device == "auto":
        import shutil
        import subprocess

        smi = shutil.which("nvidia-smi")
        device = "gpu" if smi and subprocess.run([smi, "-L"], capture_output=True).returncode == 0 else "cpu"
    return gpu_size if device == "gpu" else cpu_size

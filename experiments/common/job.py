"""The job: one composed Hydra config, validated and typed once where the sweep starts (`sweep.preflight.job`).

Every layer below the sweep takes a `Job`, never the raw config: the harness asks its workers for `job.request()`,
the store names and keys its records from it. `cfg` is kept only to be logged as it was composed (the flattened
`config.*` params and `config.yaml`).
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from experiments.common.protocol import Budget, Point, Request, Setup
from models import ModelSpec


@dataclass(frozen=True)
class Job:
    """One validated job: its resolved config as plain data, its model and its points."""

    cfg: dict
    spec: ModelSpec | None  # None: a model nnbench does not declare (an imported runner's)
    points: tuple[Point, ...]
    fingerprint: str | None = None  # of the worker's environment, as its probe reported it

    @property
    def framework(self) -> str:
        return self.cfg["framework"]["name"]

    @property
    def compile(self) -> bool:
        return bool(self.cfg["framework"]["compile"])

    @property
    def compile_mode(self) -> str:
        return self.cfg["framework"].get("compile_mode", "default")

    @property
    def memory_format(self) -> str | None:
        return self.cfg["framework"].get("memory_format")

    @property
    def mode(self) -> str:
        """How the framework ran: jax-jit, jax-eager, torch-eager, torch-compile (`compile` unless jax's `jit`), then
        `-cg` for CUDA graphs (compile_mode=reduce-overhead) and `-cl` for channels_last; an external runner's name."""
        if self.framework == "external":
            return self.external_name
        out = f"{self.framework}-" + ({"jax": "jit"}.get(self.framework, "compile") if self.compile else "eager")
        out += "-cg" if self.compile_mode == "reduce-overhead" else ""
        return out + ("-cl" if self.memory_format == "channels_last" else "")

    @property
    def model(self) -> str:
        return self.cfg["model"]["name"]

    @property
    def model_keys(self) -> dict:
        """The model's name and keys, as `models.load(**keys)` takes them."""
        return dict(self.cfg["model"])

    @property
    def precision(self) -> str:
        return self.cfg["precision"]["name"]

    @property
    def variant(self) -> str:
        """`<mode> <precision>`: a line in the plots, a column of the speedups (e.g. `jax-jit fp32`)."""
        return f"{self.mode} {self.precision}"

    @property
    def device(self) -> str:
        """As requested: auto, cpu or gpu."""
        return self.cfg["device"]

    @property
    def seed(self) -> int:
        return self.cfg.get("seed", 0)

    @property
    def repeat(self) -> int:
        return self.cfg.get("repeat", 0)

    @property
    def resume(self) -> bool:
        return bool(self.cfg.get("resume", False))

    @property
    def budget(self) -> Budget:
        return Budget.of(self.cfg["bench"])

    @property
    def processes(self) -> int:
        """Fresh worker processes per point."""
        return self.cfg["bench"]["processes"]

    @property
    def profile(self) -> bool:
        """profile=true: one more worker profiles each point once its timed workers are done."""
        return bool(self.cfg.get("profile", False))

    @property
    def workers(self) -> int:
        """Workers per point: the timed ones, and the one that profiles (a runner in another language: none)."""
        return self.processes + (self.profile and self.framework != "external")

    @property
    def timeout_s(self) -> float:
        return self.cfg["bench"]["timeout_s"]

    @property
    def python(self) -> str:
        """The interpreter of the worker."""
        return self.cfg["runtime"]["python"] or sys.executable

    @property
    def allocator(self) -> str:
        return self.cfg["runtime"]["allocator"]

    @property
    def start(self) -> str:
        """fork (from a fork server, one per job) or spawn."""
        return self.cfg["runtime"].get("start", "spawn")

    @property
    def compile_cache(self) -> bool:
        return bool(self.cfg["runtime"].get("compile_cache", False))

    @property
    def external_name(self) -> str:
        return self.cfg["external"]["name"]

    @property
    def external_command(self) -> str | None:
        return self.cfg["external"]["command"]

    @property
    def tracking_uri(self) -> str | None:
        """As configured (None: $MLFLOW_TRACKING_URI, else the local store)."""
        return self.cfg["mlflow"]["tracking_uri"]

    @property
    def experiment_name(self) -> str:
        return self.cfg["mlflow"]["experiment_name"]

    @property
    def baseline(self) -> str:
        return self.cfg["report"]["baseline"]

    @property
    def setup(self) -> Setup:
        """How the framework is set up in the worker."""
        return Setup(self.precision, self.device, self.cfg["precision"]["tf32"], self.compile, self.compile_mode,
                     self.memory_format or "n/a")

    def request(self, peaks: Path | None = None, between: dict[str, float] | None = None) -> Request:
        """What a worker is asked to do; `peaks`: the sweep's cache of calibrated peaks; `between`: op -> the spread
        between processes so far (the stop rule's)."""
        return Request(self.framework, self.setup, self.model_keys, self.seed, self.budget, self.points,
                       str(peaks) if peaks else None, between or {})

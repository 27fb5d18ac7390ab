"""The job: one composed Hydra config, validated and typed once where the sweep starts (`sweep.preflight`).

Every layer below the sweep takes a `Job`, never the raw config: its `config` is the schema's typed `Config`, and
the job adds only what is derived from it (the variant's name, the worker's set-up and request). The plain dict
that is logged (config.yaml, the flattened `config.*` params) comes from `common.config.logged`.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

from experiments.common.config import EXTERNAL, Config
from experiments.common.devices import platform
from experiments.common.frameworks import traits
from experiments.common.protocol import Budget, Point, Request, Setup
from models import Model


@dataclass(frozen=True)
class Job:
    """One validated job: its typed config, its model and its points."""

    config: Config
    spec: Model | None  # None: a model nnbench does not declare (an imported runner's)
    points: tuple[Point, ...]
    fingerprint: str | None = None  # of the worker's environment, as its probe reported it
    device: str | None = None  # where its probe said its workers will run (`tpu:0`): what `device=auto` resolved to
    # The model's own tags on each of its points (its source, its parity with the other framework, where its FLOPs
    # come from, its parameter count per framework), and "op:batch" -> FLOPs of one call where the worker can't
    # count them (a user's network, counted by one framework for both): what the sweep's parity process found.
    tags: dict[str, str] = field(default_factory=dict)
    flops: dict[str, int] = field(default_factory=dict)
    # The frameworks its sweep measures its model with, where the sweep says (a parity check compares two): () is
    # not said, and a job alone is checked as though both were.
    frameworks: tuple[str, ...] = ()

    @property
    def mode(self) -> str:
        """How the framework ran: jax-jit, jax-eager, torch-eager, torch-compile (its `Traits.mode`), then
        `-cg` for CUDA graphs (compile_mode=reduce-overhead) and `-cl` for channels_last; an external runner's name."""
        fw = self.config.framework
        if fw.name == EXTERNAL:
            return self.config.external.name
        out = traits(str(fw.name)).mode(fw.compile)
        out += "-cg" if fw.compile_mode == "reduce-overhead" else ""
        return out + ("-cl" if fw.memory_format == "channels_last" else "")

    @property
    def variant(self) -> str:
        """`<mode> <precision>`: a line in the plots, a column of the speedups (e.g. `jax-jit fp32`)."""
        return f"{self.mode} {self.config.precision.name}"

    @property
    def workers(self) -> int:
        """Workers per point: the timed ones, and the one that profiles (a runner in another language: none)."""
        return self.config.bench.processes + (self.config.profile and self.config.framework.name != EXTERNAL)

    @property
    def python(self) -> str:
        """The interpreter of the worker."""
        return self.config.runtime.python or sys.executable

    @property
    def start(self) -> str:
        """How its workers start (runtime.start): spawned where they hold an accelerator, whatever was asked. There
        the framework's import starts threads, and a child forked after it may find a lock held by a thread it
        doesn't have."""
        asked = str(self.config.runtime.start)
        return "spawn" if self.setup.device in ("tpu", "gpu") else asked

    @property
    def setup(self) -> Setup:
        """How the framework is set up in the worker (as plain text: it crosses the process boundary)."""
        c = self.config
        fmt = c.framework.memory_format
        return Setup(str(c.precision.name), platform(self.device) if self.device else str(c.device),
                     c.precision.tf32, c.framework.compile,
                     str(c.framework.compile_mode), str(fmt) if fmt is not None else "n/a", c.framework.threads)

    def request(self, peaks: Path | None = None, between: dict[str, float] | None = None) -> Request:
        """What a worker is asked to do; `peaks`: the sweep's cache of calibrated peaks; `between`: op -> the spread
        between processes so far (the stop rule's)."""
        return Request(str(self.config.framework.name), self.setup, dict(self.config.model), self.config.seed,
                       Budget.of(self.config.bench), self.points, str(peaks) if peaks else None, between or {},
                       flops=self.flops)

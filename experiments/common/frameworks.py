"""What every layer knows of a framework without importing it: its `Traits`, one descriptor per backend.

A backend is `measure/backends/<name>_backend.py` (the heavy `Backend`, imported only by its own worker) beside
`measure/backends/<name>_traits.py`, whose `TRAITS` is read here: its mode's name, how its threads are set, what its
fork server preloads, its packages, its compile caches, its default set-up, the `models.Network` field it builds.
A descriptor imports only this module, `common.protocol` and the standard library (tests/common/test_frameworks.py),
so the parent reads it without the framework; code outside the backends asks a `Traits`, never compares a
framework's name (tests/test_architecture.py).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from importlib import import_module
from pathlib import Path
from typing import Callable

from experiments.common.config import backends
from experiments.common.protocol import Setup

TRAITS = "experiments.measure.backends.{}_traits"  # a backend's descriptor, by naming convention
EAGER = "eager"  # every framework's mode name with framework.compile=false


def fresh() -> str | None:
    """A framework whose runtime starts nothing at import: a fork is always fresh."""
    return None


@dataclass(frozen=True)
class Traits:
    """One backend as the parent sees it; the fields say what differs between frameworks."""

    name: str  # the framework option (conf/framework/<name>.yaml)
    compiled: str  # the mode's name with framework.compile=true: jax-jit, torch-compile
    smoke: Setup  # its default set-up (its yaml, fp32 on the CPU): what `worker --smoke` and the parity check run
    builder: str  # the models.Network field a user's network is built from here: `torch` or `flax` ("": none)
    module: str  # what that builder returns, as a user's error names it: "torch module"
    packages: tuple[str, ...]  # the distributions it imports: an environment that moves one is validated with it
    threads: str  # what sets its intra-op threads, for the oversubscription hint
    seed_name: str  # its name in seed 000's TIMING lines (`JAX`, `PyTorch`)
    seed_variant: str  # the variant seed 000 runs it in: that mode's lines carry the plain name
    # Pinned at a package's version beside it in a measuring environment (jax: jaxlib).
    companions: dict[str, tuple[str, ...]] = field(default_factory=dict)
    hold: tuple[str, ...] = ()  # distributions an environment keeps as installed unless pinned (torch's big wheels)
    pin_threads: bool = False  # framework.threads runs the worker on that many cores (XLA follows CPU affinity)
    preloads: tuple[str, ...] = ()  # what its fork server imports beside the backend (a compiler's front end)
    started: Callable[[], str | None] = fresh  # why a fork now would not give a fresh worker (its runtime started)
    cache_on: dict[str, str] = field(default_factory=dict)  # its compile cache's variables; `{dir}`: the sweep's
    cache_off: dict[str, str] = field(default_factory=dict)  # its variables with no compiled-graph cache at all
    cuda_graphs: bool = False  # framework.compile_mode=reduce-overhead (CUDA graphs) means something here
    reference: bool = False  # compared by the parity check (a user's network: through its weight map) and the
    #   self-checks: the frameworks a Network declares builders for
    counter: str | None = None  # the `flops_source` of its own FLOP counter where it counts a user's network
    # Where it measures beside each accelerator (a point's param `device` starts with it): torch, beside a TPU, on the
    # host's CPU.
    beside: dict[str, str] = field(default_factory=dict)
    script_compiles: bool = False  # the standalone script compiles its exported graph with framework.compile=true
    script: tuple[str, ...] = ()  # what the standalone script's side needs installed beside nnbench's own

    def mode(self, compile: bool) -> str:
        """`jax-jit`, `torch-eager`, ...: how the framework ran (a point's `mode` param)."""
        return f"{self.name}-{self.compiled if compile else EAGER}"

    def cache(self, directory: Path | None) -> dict[str, str]:
        """The worker's compile-cache variables: in `directory` (the sweep's), or none at all."""
        if directory is None:
            return dict(self.cache_off)
        return {k: v.format(dir=directory) for k, v in self.cache_on.items()}


@functools.cache
def names() -> list[str]:
    """Every backend, by its file's name (read once: the folder doesn't change while a process runs)."""
    return backends()


@functools.lru_cache(maxsize=None)
def traits(name: str) -> Traits:
    """The descriptor of backend `name`, imported by its name: the only thing of a backend this layer reaches, and
    it imports nothing but this module (no framework, no other layer)."""
    return import_module(TRAITS.format(name)).TRAITS


def every() -> list[Traits]:
    return [traits(n) for n in names()]


def references() -> list[Traits]:
    """The frameworks the parity check compares and the self-checks time, in the order of their names."""
    return [t for t in every() if t.reference]


def built_with(field_name: str) -> Traits:
    """The backend that builds a user's network from this `models.Network` field (`torch`, `flax`)."""
    return next(t for t in every() if t.builder == field_name)


def param_counts(spec: object) -> dict[str, int]:
    """A user's network's trainable parameters per framework (`models.Network.params` counts them per builder)."""
    counts = getattr(spec, "params", {})
    return {t.name: counts[t.builder] for t in every() if t.builder in counts}


def declared(spec: object) -> list[Traits]:
    """The backends a user's network (a `models.Network`) declares a builder for."""
    return [t for t in every() if t.builder and getattr(spec, t.builder, None) is not None]

"""Framework adapters: `experiments/measure/backends/<name>_backend.py`, one per framework, imported only when selected.

Every adapter mirrors the others: a `Backend` class (configure, probe, prepare, matmul, peak memory, environment) and
the platforms `device=auto` takes (`PLATFORMS`, chosen by `choose`), `make_model`,
`build`, `to_input` and `make_loss` with the same signatures, the parity helpers `forward` and `loss_and_grads`
(the `Reference` protocol), and `count_flops` (the framework's own FLOP counter). `prepare` takes a `models.ModelSpec`
(the layer DSL, built from its canonical numpy weights) or a `models.Network` (a user's module, built by its own
builder) alike. An unknown layer or activation, or a Network without this framework's builder, raises `Unsupported`.
"""
from __future__ import annotations

from dataclasses import dataclass
from importlib import import_module
from typing import Any, Callable, Protocol

import numpy as np

from experiments.common.config import OPS
from experiments.common.devices import Present
from experiments.common.frameworks import declared, names, traits
from experiments.common.protocol import Setup
from models import Network

# The one place a precision name becomes a dtype name (numpy/jax/torch all spell these the same).
DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16", "fp64": "float64"}


class Unsupported(Exception):
    """This combination can't run here; the runner records a skipped op with this message."""


class Unavailable(Exception):
    """The set-up can't run here (no such device, a layout or compile mode it lacks); the message names the fix."""


@dataclass(frozen=True)
class Step:
    """One prepared op: `fn` does only the work, `sync` waits for all of it."""

    fn: Callable[[], Any]  # one call of the op; returns its whole output pytree; no sync, no host copy
    sync: Callable[[Any], None]  # blocks until every leaf of an output is computed
    device_of: Callable[[Any], str]  # where an output actually lives, e.g. "cpu" or "cuda:0"
    compiles: Callable[[], int] | None = None  # compilations so far (jit or torch.compile); None when eager
    program: Callable[[], str] | None = None  # the compiled program as text, once called; None when eager
    cost: Callable[[], int] | None = None  # FLOPs of one call as the framework counts them (XLA's cost analysis of
    #   the compiled program, torch's FlopCounterMode around an eager call); None where it has no count


@dataclass(frozen=True)
class Span:
    """One op's interval inside a profiled step, in seconds on the profiler's clock (`<name>_profile.trace`)."""

    name: str
    category: str  # one of common.protocol.CATEGORIES
    start: float
    end: float
    part: bool = False  # a piece of an op's work on another thread (XLA's thread pools): not a call of its own


@dataclass(frozen=True)
class Traced:
    """One profiled step: its interval and the ops inside it."""

    start: float
    end: float
    spans: list[Span]


class Backend(Protocol):
    def configure(self, setup: Setup) -> str:
        """Set precision policy, device, compile mode and layout before any array exists; return the device
        used ("cpu", "cuda:0", "tpu:0": `choose` among the module's PLATFORMS); raise Unavailable where this set-up
        can't run."""

    def probe(self, setup: Setup) -> str:
        """`configure`'s answer for the door, opening no device only one process may hold (a worker may need it)."""

    def prepare(self, spec: Any, op: str, batch: int, seed: int) -> Step:
        """Build the model (a ModelSpec from its numpy weights, a Network by its builder) and its batch, and return
        the op ready to time, not yet called (its first call, with the trace or compile, is timed apart); raise
        Unsupported where the model can't run it here."""

    def matmul(self, n: int) -> Step:
        """An n×n @ n×n product at the configured precision: what the device sustains (the MFU's peak)."""

    def reset_peak_memory(self) -> None:
        """Start a new peak for `peak_memory` (where the framework can)."""

    def cache_hits(self) -> int:
        """Compiled programs loaded from the persistent compile cache so far in this process (0: none, or eager)."""

    def peak_memory(self) -> int | None:
        """Peak device memory in bytes since the reset; None where the framework can't say (the CPU)."""

    def environment(self) -> dict[str, str]:
        """Allow-listed versions and device facts of the framework as imported in this process."""


class Reference(Protocol):
    """What the parity tests call in each adapter module: fp32, on the CPU, from canonical numpy weights."""

    def forward(self, spec: Any, params: dict[str, np.ndarray], x: np.ndarray) -> np.ndarray:
        """Eval-mode output."""

    def loss_and_grads(self, spec: Any, params: dict[str, np.ndarray], x: np.ndarray, y: np.ndarray):
        """Train-mode loss and gradients in the canonical layout (w.r.t. x for constant-weight models)."""


def validate_op(spec: Any, op: str) -> None:
    """What no framework can do, whichever adapter is asked: an unknown op, or training constant weights."""
    if op not in OPS:
        raise ValueError(f"unknown op {op!r}; ops: {', '.join(OPS)}")
    if op == "training" and not spec.trainable:
        raise Unsupported(f"{spec.name} has constant weights (seed 004); use ops=[inference,grad]")


def validate_side(spec: Any, framework: str) -> None:
    """A user's network measures only in the frameworks it declares a builder for (a runner takes it by name)."""
    if not isinstance(spec, Network) or framework not in names():
        return
    t = traits(framework)
    if t not in (there := declared(spec)):
        others = " and ".join(o.name for o in there) or "no framework"
        missing = f"declares no {t.module} ({t.builder}=...)" if t.builder else f"is a network the {t.name} backend " \
            "can't build"
        raise Unsupported(f"{spec.name} {missing}: only {others} measures it")


NAMES = {"tpu": "TPU", "gpu": "GPU", "cpu": "CPU"}  # a platform as people write it


@dataclass(frozen=True)
class Platforms:
    """What a framework can measure on, in the order device=auto takes them, and how to give it one it lacks."""

    framework: str
    order: tuple[str, ...]
    install: dict[str, str]  # platform -> the fix where the framework can't open one the machine has or was asked for


def choose(platforms: Platforms, wanted: str, seen: dict[str, str | None], machine: Present) -> str:
    """The platform a set-up measures on: `wanted` (tpu, gpu, cpu), or for auto the first of the framework's
    platforms it can open. `seen`: per platform, None where the framework can open it, else why not (its own words);
    `machine`: what the machine has. Unavailable where an accelerator is asked for and not there, or where the
    machine has one the framework could open and doesn't: never a silent fallback to the CPU."""
    framework, order = platforms.framework, platforms.order
    if wanted not in ("auto", "cpu") and wanted not in order:
        raise Unavailable(f"device={wanted}: {framework} has no {NAMES[wanted]} backend: use device=auto, where "
                          f"{framework} takes {' or else '.join(NAMES[p] for p in order)}, or device=cpu")
    for platform in (order if wanted == "auto" else (wanted,)):
        why = seen.get(platform, "not looked for")
        if why is None or platform == "cpu":
            return platform
        if wanted != "auto" or machine.has(platform):
            has = f"this machine has a {machine.kind(platform)}, but " if machine.has(platform) else ""
            raise Unavailable(f"device={wanted}: {has}{framework} sees no {NAMES[platform]} ({why}): "
                              f"{platforms.install[platform]}, or use device=cpu")
    return "cpu"


def unsupported(framework: str, layer: Any) -> Unsupported:
    return Unsupported(f"the {framework} backend has no layer {layer!r}")


def module(framework: str):
    """The adapter module, by naming convention (the parity tests use its `Reference` functions)."""
    return import_module(f"{__name__}.{framework}_backend")


def load(framework: str) -> Backend:
    return module(framework).Backend()

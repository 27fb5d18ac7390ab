"""JAX/Flax-NNX adapter: standard nnx layers built from the spec's numpy weights, channels-last (NHWC), or a user's
nnx module from its builder; both measured alike.

compile=True: `nnx.split` once, then `jax.jit` of pure functions of the state (graphdef closed over, training state
donated, Adam as plain optax on the split params); compile=False: the same functions, eager, op by op.
The state goes in as a flat list of arrays, flattened once outside the timed call, and all of it, optimizer
state included, is placed on the device first: an nnx.State argument cost 22.0 µs per call against 6.8 µs for
the list (a no-op jit, this CPU), and an unplaced Adam step counter compiled the training step twice (cache 2).
"""
from __future__ import annotations

import dataclasses
import importlib.util
import os
from pathlib import Path

import flax
import jax
import jax.numpy as jnp
import jaxlib
import numpy as np
import optax
from flax import nnx

from experiments.common.devices import Present, present
from experiments.common.protocol import Setup
from experiments.measure.backends import Platforms, Step, Unavailable, choose, validate_op, validate_side
from experiments.measure.backends.jax_layers import dtype, make_model
from models import Model, ModelSpec, Network

# Each loss on (output, target); cross-entropy written with jax.nn (optax's would sit under /optax/ in the profile's
# source stacks, where the optimizer's work is found).
LOSSES = {
    "sse": lambda yhat, y: jnp.sum((yhat - y) ** 2),
    "mean": lambda yhat, y: jnp.mean(yhat),
    "cross_entropy": lambda yhat, y: -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(yhat), y[..., None], -1)),
}


def split(model: nnx.Module):
    """(graphdef, params, rest): rest holds BatchNorm stats and matmul_chain's constants."""
    return nnx.split(model, nnx.Param, ...)


def to_input(a: np.ndarray, of, precision: str, device, memory_format: str = "nhwc") -> jax.Array:
    """A canonical batch as is (`of`: what it is, models.Image, Tokens...): images stay channels-last, XLA's layout
    (`configure` rejects any other); floats in the run's precision; integer tokens and labels stay int32."""
    kind = a.dtype if np.issubdtype(a.dtype, np.integer) else dtype(precision)
    return jax.device_put(jnp.asarray(a, kind), device)


def count_params(model: nnx.Module) -> int:
    """Trainable parameters of a built model, as flax counts them (its `nnx.Param`s)."""
    return sum(int(np.size(v.get_value())) for _, v in nnx.to_flat_state(nnx.state(model, nnx.Param)))


def build(spec: Model, seed: int, precision: str, train: bool) -> nnx.Module:
    """The model in train or eval mode: the DSL's from its canonical weights, a user's from its Flax builder (its
    floating-point variables cast to the run's precision)."""
    if not isinstance(spec, Network):
        return make_model(spec, spec.init(seed), precision, train)
    model = spec.flax()
    state = nnx.state(model)
    nnx.update(model, jax.tree.map(lambda a: a.astype(dtype(precision)) if jnp.issubdtype(a.dtype, jnp.floating)
                                   else a, state))
    model.train() if train else model.eval()
    return model


def make_loss(spec: Model, model: nnx.Module):
    """Pure loss(params, rest, x, y) -> (value, new rest) of the split model; train-mode BatchNorm updates rest."""
    graphdef, of = split(model)[0], LOSSES[spec.loss]

    def loss(params, rest, x, y):
        model = nnx.merge(graphdef, params, rest, copy=True)  # fresh Variables: BatchNorm may update them in a trace
        return of(model(x), y), split(model)[2]

    return loss


def make_grad(spec: ModelSpec, loss):
    """(params, rest, x, y) -> (loss, grads) w.r.t. the params, or w.r.t. x for constant-weight models."""
    vg = jax.value_and_grad(loss, argnums=0 if spec.trainable else 2, has_aux=True)

    def grad(params, rest, x, y):
        (value, _), g = vg(params, rest, x, y)
        return value, g

    return grad


def canonical(state) -> dict[str, np.ndarray]:
    """nnx state paths ("layers", 3, "body", "layers", 0, "kernel") -> canonical keys ("3.0.kernel")."""
    return {".".join(str(k) for k in path if k not in ("layers", "body")): np.asarray(v[...])
            for path, v in nnx.to_flat_state(state)}


def from_output(spec: Model, out: jax.Array) -> np.ndarray:
    """An output as a canonical numpy array: jax's are canonical already (images channels-last)."""
    return np.asarray(out)


def forward(spec: Model, params: dict[str, np.ndarray], x: np.ndarray) -> np.ndarray:
    """Eval-mode output at fp32 on the default device, for parity tests (jitted: one compile, where eager jax
    compiles each primitive, 3-15 s for a transformer's gradient)."""
    graphdef, p, rest = split(make_model(spec, params, "fp32", train=False))
    out = jax.jit(lambda p, rest, x: nnx.merge(graphdef, p, rest)(x))(p, rest, to_input(x, spec.input, "fp32", None))
    return from_output(spec, out)


def loss_and_grads(spec: Model, params: dict[str, np.ndarray], x: np.ndarray, y: np.ndarray):
    """Train-mode loss and gradients in the canonical layout (w.r.t. x for constant-weight models), jitted."""
    model = make_model(spec, params, "fp32", train=True)
    _, p, rest = split(model)
    x, y = to_input(x, spec.input, "fp32", None), to_input(y, spec.target, "fp32", None)
    value, g = jax.jit(make_grad(spec, make_loss(spec, model)))(p, rest, x, y)
    return float(value), canonical(g) if spec.trainable else np.asarray(g)


def make_train_step(loss, tx: optax.GradientTransformation):
    """One Adam step on (params, rest, opt_state): loss, backward, update, new BatchNorm stats."""

    def step(state, x, y):
        params, rest, opt_state = state
        (value, rest), grads = jax.value_and_grad(loss, has_aux=True)(params, rest, x, y)
        updates, opt_state = tx.update(grads, opt_state, params)
        return (optax.apply_updates(params, updates), rest, opt_state), value

    return step


def device_name(d) -> str:
    return "cpu" if d.platform == "cpu" else f"{'cuda' if d.platform == 'gpu' else d.platform}:{d.id}"


def flat(f, state, device):
    """f(state, *args) as g(leaves, *args) on the state's leaves placed on the device, and those leaves: a list
    flattens in C++ per call, an nnx.State in Python."""
    leaves, tree = jax.tree.flatten(jax.device_put(state, device))

    def g(leaves, *args):
        return f(jax.tree.unflatten(tree, leaves), *args)

    return g, leaves


# What device=auto takes, in order, and how to give jax a platform it lacks.
PLATFORMS = Platforms("jax", ("tpu", "gpu", "cpu"), {
    "tpu": "install jax's TPU build (pip install -e '.[tpu]' in the checkout, i.e. jax[tpu])",
    "gpu": "install its CUDA build (pip install -e '.[cuda]' in the checkout, i.e. jax[cuda12])"})
# On a TPU an fp32 matmul is bf16 passes on its matrix units: jax's `highest` takes 6, `high` (precision.tf32=true)
# takes 3 (jax.lax.Precision). The precision policy names them, as tf32-on and tf32-off do on a GPU.
TPU_PASSES = {False: 6, True: 3}


def seen() -> dict[str, str | None]:
    """Per platform, None where jax opens it here, else jax's own reason (a plugin missing, or failing to start)."""
    out: dict[str, str | None] = {}
    for platform in PLATFORMS.order:
        try:
            jax.devices(platform)
            out[platform] = None
        except RuntimeError as e:
            out[platform] = (str(e).strip().splitlines() or ["no devices"])[0][:300]
    return out


def plugged(machine: Present) -> dict[str, str | None]:
    """What `seen` would say, without opening a device only one process may hold: a TPU is there when the machine
    has one and jax's TPU plugin (libtpu) is installed."""
    plugin = os.environ.get("TPU_LIBRARY_PATH") or importlib.util.find_spec("libtpu")
    tpu = None if machine.tpus and plugin else "no TPU plugin (libtpu) installed" if machine.tpus else "no TPU"
    return {"tpu": tpu, "gpu": "not looked for beside a TPU", "cpu": None}


class Backend:
    def __init__(self):
        self.setup = Setup("fp32", "cpu")
        self.device = None  # configure picks it: asking jax for any device would open every platform, a TPU too
        self.expected: tuple[str, str] | None = None  # a probe's (platform, kind) of a device it left closed
        self.hits = 0
        jax.monitoring.register_event_listener(self._event)  # the persistent cache's hits, as jax counts them

    def _event(self, event: str, **kwargs) -> None:
        self.hits += event == "/jax/compilation_cache/cache_hits"

    def cache_hits(self) -> int:
        return self.hits

    def configure(self, setup: Setup) -> str:
        if setup.memory_format != "nhwc" or setup.compile_mode != "default":
            raise Unavailable(f"jax runs memory_format=nhwc and compile_mode=default only (got {setup.memory_format}, "
                              f"{setup.compile_mode}): drop framework.memory_format and framework.compile_mode")
        if setup.threads is not None and setup.threads != len(os.sched_getaffinity(0)):
            raise Unavailable(f"framework.threads={setup.threads}: XLA runs one CPU thread per core the worker may "
                              f"use (here {len(os.sched_getaffinity(0))}): give 1 to that, or null for all of them")
        if setup.precision == "fp64":
            jax.config.update("jax_enable_x64", True)  # global, and only safe before any array exists
        jax.config.update("jax_default_matmul_precision", "tensorfloat32" if setup.tf32 else "highest")
        machine = present()
        if setup.device == "cpu" and machine.exclusive:  # jax opens every platform at the first device asked for
            jax.config.update("jax_platforms", "cpu")
        platform = "cpu" if setup.device == "cpu" else choose(PLATFORMS, setup.device, seen(), machine)
        self.device = jax.devices(platform)[0]
        jax.config.update("jax_default_device", self.device)
        self.setup = setup
        return device_name(self.device)

    def probe(self, setup: Setup) -> str:
        """`configure`'s answer for the door, without opening a device only one process may hold (a TPU chip, which
        a worker may need meanwhile): on such a machine jax starts on the CPU only, and the device is the one the
        bus lists where jax's plugin for it is installed."""
        machine = present()
        if not machine.exclusive:
            return self.configure(setup)
        jax.config.update("jax_platforms", "cpu")  # before any device is asked for
        platform = choose(PLATFORMS, setup.device, plugged(machine), machine)
        self.configure(dataclasses.replace(setup, device="cpu"))
        if platform == "cpu":
            return "cpu"
        self.expected = platform, machine.kind(platform)
        return f"{platform}:0"

    def prepare(self, spec: Model, op: str, batch: int, seed: int) -> Step:
        jitted, fn, args = self.program(spec, op, batch, seed, jax.jit if self.setup.compile else lambda f, **_: f)
        if not self.setup.compile:
            return Step(fn, jax.block_until_ready, device_of)

        def compiled():
            return jitted.lower(*args()).compile()  # lowering reads only shapes and dtypes; jax caches it

        return Step(fn, jax.block_until_ready, device_of, compiles=jitted._cache_size,
                    program=lambda: compiled().as_text(),  # XLA's optimized HLO
                    cost=lambda: cost_flops(compiled().cost_analysis()))

    def program(self, spec: Model, op: str, batch: int, seed: int, jit):
        """The op's (jitted, fn, args) on its model and batch, built on this device at the set-up's precision."""
        validate_op(spec, op)
        validate_side(spec, "jax")
        precision = self.setup.precision
        x, y = spec.make_batch(batch, seed)
        x, y = to_input(x, spec.input, precision, self.device), to_input(y, spec.target, precision, self.device)
        model = build(spec, seed, precision, train=op != "inference")
        return PROGRAMS[op](spec, model, jit, self.device, x, y)

    def export(self, spec: Model, op: str, batch: int, seed: int, out: Path) -> list[Path]:
        """The op's jitted program as jax.export serializes it (`out`.jax, StableHLO) and its arguments (`out`.npz,
        flat, in the order of the program's input tree), for a script with jax alone: the whole step, the
        optimizer's update included (training), jitted whatever the set-up (an export is a traced program)."""
        jitted, _, args = self.program(spec, op, batch, seed, jax.jit)
        program, arrays = out.with_suffix(".jax"), out.with_suffix(".npz")
        program.write_bytes(jax.export.export(jitted)(*args()).serialize())
        np.savez(arrays, *(np.asarray(a) for a in jax.tree.leaves(args())))
        return [program, arrays]

    def matmul(self, n: int) -> Step:
        a = jax.device_put(jnp.ones((n, n), dtype(self.setup.precision)) / n, self.device)
        mm = jax.jit(jnp.matmul)
        return Step(lambda: mm(a, a), jax.block_until_ready, device_of, compiles=mm._cache_size)

    def reset_peak_memory(self) -> None:
        """XLA keeps one peak per process: ops measured later in a worker report the larger of theirs and earlier."""

    def peak_memory(self) -> int | None:
        stats = self.device.memory_stats() if self.device.platform != "cpu" else None
        return int(stats["peak_bytes_in_use"]) if stats and "peak_bytes_in_use" in stats else None

    def environment(self) -> dict[str, str]:
        from jax._src.lib import cuda_versions  # None on CPU-only installs

        platform, kind = self.expected or (self.device.platform, self.device.device_kind)
        env = {"jax_version": jax.__version__, "jaxlib_version": jaxlib.__version__, "flax_version": flax.__version__,
               "optax_version": optax.__version__, "device_name": kind, "device_platform": platform}
        if platform == "tpu":
            env["precision_policy"] = f"{self.setup.precision}/bf16x{TPU_PASSES[self.setup.tf32]}"
        if cuda_versions is not None:
            env["cuda_version"] = str(cuda_versions.cuda_runtime_get_version())
            env["cudnn_version"] = str(cuda_versions.cudnn_get_version())
        if "XLA_FLAGS" in os.environ:
            env["xla_flags"] = os.environ["XLA_FLAGS"]
        return env


def _inference(spec: Model, model, jit, device, x, y):
    """(the jitted function, the timed call, its arguments now) of a forward pass."""
    graphdef, p, rest = split(model)
    f, leaves = flat(lambda state, x: nnx.merge(graphdef, *state)(x), (p, rest), device)
    jitted = jit(f)
    return jitted, lambda: jitted(leaves, x), lambda: (leaves, x)


def _grad(spec: Model, model, jit, device, x, y):
    """The same for the loss's gradient."""
    _, p, rest = split(model)
    grad = make_grad(spec, make_loss(spec, model))
    f, leaves = flat(lambda state, x, y: grad(*state, x, y), (p, rest), device)
    jitted = jit(f)
    return jitted, lambda: jitted(leaves, x, y), lambda: (leaves, x, y)


def _training(spec: Model, model, jit, device, x, y):
    """The same for one Adam step, its state donated and replaced by the new one at each call."""
    _, p, rest = split(model)
    tx = optax.adam(1e-3)
    train = make_train_step(make_loss(spec, model), tx)

    def step(state, x, y):
        new, loss = train(state, x, y)
        return jax.tree.leaves(new), loss  # the same order as the leaves that went in

    f, leaves = flat(step, (p, rest, tx.init(p)), device)
    jitted = jit(f, donate_argnums=0)

    def fn():
        nonlocal leaves  # the previous state was donated: keep only the new one
        leaves, loss = jitted(leaves, x, y)
        return leaves, loss

    return jitted, fn, lambda: (leaves, x, y)  # the current state: lowering reads only shapes and dtypes


PROGRAMS = {"inference": _inference, "grad": _grad, "training": _training}


def cost_flops(cost) -> int:
    """XLA's FLOP count from a compiled program's cost analysis (a dict in jax 0.10, a list of dicts before)."""
    return int((cost[0] if isinstance(cost, list) else cost)["flops"])


def device_of(out) -> str:
    return device_name(next(iter(jax.tree.leaves(out)[0].devices())))

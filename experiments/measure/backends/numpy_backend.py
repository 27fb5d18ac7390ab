"""numpy reference adapter: the layer DSL's inference in plain numpy on the CPU, from the spec's canonical weights
(channels-last, kernels (in, out), as flax's); eager only, no gradients.

What it measures is what numpy's own BLAS does with the same network: a floor to read the frameworks against. A
layer it lacks, training, grad, a user's network, a compiler or an accelerator raise `Unsupported` or
`Unavailable`, which the sweep records as a skipped op or a one-line error, with the reason.
"""
from __future__ import annotations

import math
import os

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from experiments.common.devices import present
from experiments.common.protocol import Setup
from experiments.measure.backends import DTYPES, Platforms, Step, Unavailable, Unsupported, choose, unsupported
from experiments.measure.backends import validate_op, validate_side
from models import Act, Conv, Dense, Flatten, MaxPool, Model, ModelSpec, pair

# device=auto takes the CPU: numpy has nothing else.
PLATFORMS = Platforms("numpy", ("cpu",), {})
# The activations it offers (gelu_tanh in the tanh form both frameworks use).
ACTS = {"relu": lambda x: np.maximum(x, 0),
        "gelu_tanh": lambda x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3))),
        "silu": lambda x: x / (1 + np.exp(-x))}


def dense(params: dict[str, np.ndarray], p: str, r: Dense):
    kernel, bias = params[p + "kernel"], params[p + "bias"]
    return lambda x: x @ kernel + bias


def conv(params: dict[str, np.ndarray], p: str, r: Conv):
    """A convolution over NHWC with an HWIO kernel, as windows times the kernel (groups=1 only)."""
    if r.groups != 1:
        raise Unsupported(f"the numpy backend has no grouped convolution (groups={r.groups})")
    kernel, bias, (kh, kw), (ph, pw) = params[p + "kernel"], params.get(p + "bias"), pair(r.k), pair(r.pad)

    def fn(x):
        x = np.pad(x, ((0, 0), (ph, ph), (pw, pw), (0, 0)))
        windows = sliding_window_view(x, (kh, kw), axis=(1, 2))[:, ::r.stride, ::r.stride]  # (n, h, w, c, kh, kw)
        out = np.einsum("nhwcij,ijco->nhwo", windows, kernel, optimize=True)
        return out if bias is None else out + bias
    return fn


def max_pool(params: dict[str, np.ndarray], p: str, r: MaxPool):
    def fn(x):
        n, h, w, c = x.shape
        x = x[:, :h // r.k * r.k, :w // r.k * r.k]  # a partial window is dropped, as flax's VALID pooling
        return x.reshape(n, h // r.k, r.k, w // r.k, r.k, c).max(axis=(2, 4))
    return fn


# One builder per layer it offers: (params, "<index>.", layer) -> a function of the layer's input.
BUILDERS = {Dense: dense, Conv: conv, MaxPool: max_pool,
            Act: lambda params, p, r: ACTS[r.fn] if r.fn in ACTS else None,
            Flatten: lambda params, p, r: lambda x: x.reshape(len(x), -1)}


def make_model(spec: ModelSpec, params: dict[str, np.ndarray], dtype):
    """The layers as functions, the weights cast to `dtype`; Unsupported where numpy lacks one."""
    params = {k: v.astype(dtype) for k, v in params.items()}
    fns = [BUILDERS[type(r)](params, f"{i}.", r) if type(r) in BUILDERS else None for i, r in enumerate(spec.layers)]
    if None in fns:
        raise unsupported("numpy", spec.layers[fns.index(None)])

    def call(x):
        for fn in fns:
            x = fn(x)
        return x
    return call


def forward(spec: ModelSpec, params: dict[str, np.ndarray], x: np.ndarray, precision: str = "fp32") -> np.ndarray:
    """Eval-mode output from canonical weights."""
    dtype = np.dtype(DTYPES[precision])
    return make_model(spec, params, dtype)(x.astype(dtype))


class Backend:
    def __init__(self):
        self.setup = Setup("fp32", "cpu")

    def configure(self, setup: Setup) -> str:
        choose(PLATFORMS, setup.device, {"cpu": None}, present())
        if setup.compile:
            raise Unavailable("numpy has no compiler: use framework.compile=false")
        if setup.precision not in ("fp32", "fp64"):
            raise Unavailable(f"numpy has no {setup.precision} matmul: use precision=fp32 or fp64")
        if setup.threads is not None:
            raise Unavailable("numpy's BLAS threads are set outside it (OMP_NUM_THREADS): use framework.threads=null")
        self.setup = setup
        return "cpu"

    def probe(self, setup: Setup) -> str:
        return self.configure(setup)

    def prepare(self, spec: Model, op: str, batch: int, seed: int) -> Step:
        validate_op(spec, op)
        validate_side(spec, "numpy")
        if not isinstance(spec, ModelSpec) or op != "inference":
            raise Unsupported(f"the numpy backend measures inference only (asked: {op})")
        dtype = np.dtype(DTYPES[self.setup.precision])
        model, x = make_model(spec, spec.init(seed), dtype), spec.make_batch(batch, seed)[0].astype(dtype)
        return Step(lambda: model(x), lambda out: None, lambda out: "cpu")

    def matmul(self, n: int) -> Step:
        a = np.full((n, n), 1 / n, dtype=DTYPES[self.setup.precision])
        return Step(lambda: a @ a, lambda out: None, lambda out: "cpu")

    def cache_hits(self) -> int:
        return 0

    def reset_peak_memory(self) -> None:
        return None

    def peak_memory(self) -> int | None:
        return None

    def environment(self) -> dict[str, str]:
        return {"numpy_version": np.__version__, "device_name": "cpu", "device_platform": "cpu",
                "numpy_threads": os.environ.get("OMP_NUM_THREADS", "default")}

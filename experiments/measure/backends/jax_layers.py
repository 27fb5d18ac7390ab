"""The model as nnx layers, built from the spec's numpy weights (channels-last), in train or eval mode."""
from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from experiments.measure.backends import DTYPES, unsupported
from models import (Act, BatchNorm, Conv, Dense, Flatten, GlobalMeanPool, MatmulChain, MaxPool, Mean, ModelSpec,
                    Residual)

ACTS = {"relu": jax.nn.relu, "gelu_tanh": partial(jax.nn.gelu, approximate=True)}


class Const(nnx.Variable):
    """matmul_chain's weights: neither trained nor differentiated (seed 004 takes the grad w.r.t. x)."""


class ResidualBlock(nnx.Module):
    def __init__(self, body: nnx.Sequential):
        self.body = body

    def __call__(self, x):
        return x + self.body(x)


class MatmulChainBlock(nnx.Module):
    def __init__(self, depth: int, w1, b1, w2, b2):
        self.depth = depth
        self.w1, self.b1, self.w2, self.b2 = Const(w1), Const(b1), Const(w2), Const(b2)

    def __call__(self, o):
        w1, b1, w2, b2 = self.w1[...], self.b1[...], self.w2[...], self.b2[...]
        for _ in range(self.depth):  # a Python loop on both sides (unrolled by jit); the seed's fori_loop
            o = (o @ w1 - b1) @ w2 - b2  # would compile its body even without jit, so "eager" would not be
        return o


def flatten(x):
    return x.reshape(x.shape[0], -1)  # channels-last: (h, w, c) row-major, the canonical order


def global_mean_pool(x):
    return x.mean(axis=(1, 2))


def _build(layers: tuple, params: dict[str, np.ndarray], dtype, prefix: str = "") -> nnx.Sequential:
    """nnx layers whose initializers return the given weights, so paths are "layers/<i>/kernel" etc."""
    rngs = nnx.Rngs(0)  # required by the constructors; every initializer below ignores it

    def w(key: str):
        return lambda _rng, _shape, _dtype: jnp.asarray(params[key], dtype)

    mods = []
    for i, layer in enumerate(layers):
        p = f"{prefix}{i}."
        match layer:
            case Dense(din, dout):
                mods.append(nnx.Linear(din, dout, kernel_init=w(p + "kernel"), bias_init=w(p + "bias"),
                                       param_dtype=dtype, rngs=rngs))
            case Conv(cin, cout, k, stride, pad, bias):
                init = {"kernel_init": w(p + "kernel")} | ({"bias_init": w(p + "bias")} if bias else {})
                mods.append(nnx.Conv(cin, cout, (k, k), strides=stride, padding=[(pad, pad)] * 2, use_bias=bias,
                                     param_dtype=dtype, rngs=rngs, **init))
            case BatchNorm(c):
                # momentum: flax 0.9 == torch 0.1. Two-pass variance as torch: flax's default E[x²]−E[x]² lost
                # 30% of the loss of mlp_batchnorm at batch 2 in fp32 (8.95 vs a float64 reference of 6.83).
                bn = nnx.BatchNorm(c, momentum=0.9, epsilon=1e-5, use_fast_variance=False, scale_init=w(p + "scale"),
                                   bias_init=w(p + "bias"), param_dtype=dtype, rngs=rngs)
                bn.mean[...] = jnp.asarray(params[p + "mean"], dtype)
                bn.var[...] = jnp.asarray(params[p + "var"], dtype)
                mods.append(bn)
            case Act(fn) if fn in ACTS:
                mods.append(ACTS[fn])
            case MaxPool(k):
                mods.append(partial(nnx.max_pool, window_shape=(k, k), strides=(k, k)))
            case Flatten():
                mods.append(flatten)
            case GlobalMeanPool():
                mods.append(global_mean_pool)
            case Mean():
                mods.append(jnp.mean)
            case Residual(inner):
                mods.append(ResidualBlock(_build(inner, params, dtype, p)))
            case MatmulChain(_, depth):
                weights = (jnp.asarray(params[p + k], dtype) for k in ("w1", "b1", "w2", "b2"))
                mods.append(MatmulChainBlock(depth, *weights))
            case _:
                raise unsupported("jax", layer)
    return nnx.Sequential(*mods)


def dtype(precision: str):
    return jnp.dtype(DTYPES[precision])


def make_model(spec: ModelSpec, params: dict[str, np.ndarray], precision: str, train: bool) -> nnx.Sequential:
    """The model in train or eval mode, its weights the spec's canonical ones, on the default device."""
    model = _build(spec.layers, params, dtype(precision))
    model.train() if train else model.eval()
    return model

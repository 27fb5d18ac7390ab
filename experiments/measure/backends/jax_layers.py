"""The model as nnx layers, built from the spec's numpy weights (channels-last), in train or eval mode."""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from experiments.measure.backends import DTYPES, unsupported
from models import (LSTM, LSTM_GATES, Act, Attention, BatchNorm, ClassToken, Concat, Conv, Dense, Embed, Flatten,
                    GlobalMeanPool, GroupNorm, LayerNorm, MatmulChain, MaxPool, Mean, ModelSpec, PosEmbed, RMSNorm,
                    Residual, Token, ToTokens, Upsample, lstm_name, pair)

ACTS = {"relu": jax.nn.relu, "gelu_tanh": partial(jax.nn.gelu, approximate=True),
        "gelu": partial(jax.nn.gelu, approximate=False), "silu": jax.nn.silu}


class Const(nnx.Variable):
    """matmul_chain's weights: neither trained nor differentiated (seed 004 takes the grad w.r.t. x)."""


class ResidualBlock(nnx.Module):
    def __init__(self, body: nnx.Sequential):
        self.body = body

    def __call__(self, x):
        return x + self.body(x)


class ConcatBlock(nnx.Module):
    def __init__(self, body: nnx.Sequential):
        self.body = body

    def __call__(self, x):
        return jnp.concatenate([x, self.body(x)], axis=-1)


class MatmulChainBlock(nnx.Module):
    def __init__(self, depth: int, w1, b1, w2, b2):
        self.depth = depth
        self.w1, self.b1, self.w2, self.b2 = Const(w1), Const(b1), Const(w2), Const(b2)

    def __call__(self, o):
        w1, b1, w2, b2 = self.w1[...], self.b1[...], self.w2[...], self.b2[...]
        for _ in range(self.depth):  # a Python loop on both sides (unrolled by jit); the seed's fori_loop
            o = (o @ w1 - b1) @ w2 - b2  # would compile its body even without jit, so "eager" would not be
        return o


class PosEmbedding(nnx.Module):
    def __init__(self, table):
        self.embedding = nnx.Param(table)

    def __call__(self, x):
        return x + self.embedding[...]


class ClassTokenBlock(nnx.Module):
    def __init__(self, token):
        self.token = nnx.Param(token)

    def __call__(self, x):
        token = jnp.broadcast_to(self.token[...], (x.shape[0], 1, x.shape[-1]))
        return jnp.concatenate([token, x], axis=1)


def attend(q, k, v, causal: bool):
    """The fused scaled dot product on (batch, length, heads, head dim): jax.nn.dot_product_attention, XLA's own
    implementation on the CPU (cuDNN's only where asked)."""
    return jax.nn.dot_product_attention(q, k, v, is_causal=causal)


class SelfAttention(nnx.Module):
    """Multi-head self-attention: one qkv projection (q, k, v side by side), `attend`, an output projection."""

    def __init__(self, qkv: nnx.Linear, out: nnx.Linear, heads: int, causal: bool):
        self.qkv, self.out, self.heads, self.causal = qkv, out, heads, causal

    def __call__(self, x):
        n, length, d = x.shape
        q, k, v = jnp.split(self.qkv(x).reshape(n, length, 3 * self.heads, d // self.heads), 3, axis=2)
        return self.out(attend(q, k, v, self.causal).reshape(n, length, d))


class LSTMBlock(nnx.Module):
    """flax's LSTMCell scanned over the sequence by nnx.RNN, from a zero state given as such (so the model carries
    no RNG stream of nnx.RNN's: nothing random is drawn)."""

    def __init__(self, cell: nnx.LSTMCell):
        self.cell = cell

    def __call__(self, x):
        zeros = jnp.zeros((x.shape[0], self.cell.hidden_features), x.dtype)
        return nnx.RNN(self.cell, rngs=False)(x, initial_carry=(zeros, zeros))


def flatten(x):
    return x.reshape(x.shape[0], -1)  # channels-last: (h, w, c) row-major, the canonical order


def global_mean_pool(x):
    return x.mean(axis=(1, 2))


def upsample(x, k: int):
    """Nearest-neighbour: each pixel a k×k block (jax.image.resize's `nearest` at an integer factor)."""
    n, h, w, c = x.shape
    return jax.image.resize(x, (n, h * k, w * k, c), "nearest")


def to_tokens(x):
    return x.reshape(x.shape[0], -1, x.shape[-1])  # (h, w, c) -> (h·w, c), row-major


def token(x, index: int):
    return x[:, index]


@dataclass
class _From:
    """What every builder below reads: the canonical weights, the dtype, and the constructors' (ignored) rngs."""

    params: dict[str, np.ndarray]
    dtype: Any
    rngs: nnx.Rngs = field(default_factory=lambda: nnx.Rngs(0))  # every initializer below ignores it

    def w(self, key: str):
        return lambda _rng, _shape, _dtype: jnp.asarray(self.params[key], self.dtype)

    def array(self, key: str):
        return jnp.asarray(self.params[key], self.dtype)

    def linear(self, din: int, dout: int, key: str) -> nnx.Linear:
        return nnx.Linear(din, dout, kernel_init=self.w(key + "kernel"), bias_init=self.w(key + "bias"),
                          param_dtype=self.dtype, rngs=self.rngs)

    def norm(self, cls, *args, p: str, bias: bool = True, **kw):
        # Two-pass variance as torch: flax's default E[x²]−E[x]² lost 30% of the loss of mlp_batchnorm at batch 2
        # in fp32 (8.95 vs a float64 reference of 6.83). eps as torch's defaults (flax's LayerNorm/GroupNorm: 1e-6).
        init = {"scale_init": self.w(p + "scale")} | ({"bias_init": self.w(p + "bias")} if bias else {})
        return cls(*args, use_fast_variance=False, param_dtype=self.dtype, rngs=self.rngs, **init, **kw)


def _conv(f: _From, layer: Conv, p: str):
    init = {"kernel_init": f.w(p + "kernel")} | ({"bias_init": f.w(p + "bias")} if layer.bias else {})
    return nnx.Conv(layer.cin, layer.cout, pair(layer.k), strides=layer.stride,
                    padding=[(q, q) for q in pair(layer.pad)], feature_group_count=layer.groups, use_bias=layer.bias,
                    param_dtype=f.dtype, rngs=f.rngs, **init)


def _batch_norm(f: _From, layer: BatchNorm, p: str):
    bn = f.norm(nnx.BatchNorm, layer.c, p=p, momentum=0.9, epsilon=1e-5)  # flax 0.9 == torch 0.1
    bn.mean[...], bn.var[...] = f.array(p + "mean"), f.array(p + "var")
    return bn


def _act(f: _From, layer: Act, p: str):
    if layer.fn not in ACTS:
        raise unsupported("jax", layer)
    return ACTS[layer.fn]


def _lstm(f: _From, layer: LSTM, p: str):
    cell = nnx.LSTMCell(layer.din, layer.hidden, param_dtype=f.dtype, rngs=f.rngs)
    for gate in LSTM_GATES:  # flax's cell: one Linear per gate and side, the bias on the hidden side
        for side in ("i", "h"):
            key, lin = f"{p}cell.{lstm_name(side, gate)}.", getattr(cell, lstm_name(side, gate))
            lin.kernel[...] = f.array(key + "kernel")
            if side == "h":
                lin.bias[...] = f.array(key + "bias")
    return LSTMBlock(cell)


# One builder per layer record: (weights, the record, its key prefix) -> an nnx module or a function.
BUILDERS: dict[type, Callable[[_From, Any, str], Any]] = {
    Dense: lambda f, r, p: f.linear(r.din, r.dout, p),
    Conv: _conv,
    BatchNorm: _batch_norm,
    LayerNorm: lambda f, r, p: f.norm(nnx.LayerNorm, r.d, p=p, epsilon=1e-5),
    RMSNorm: lambda f, r, p: f.norm(nnx.RMSNorm, r.d, p=p, bias=False, epsilon=1e-6),
    GroupNorm: lambda f, r, p: f.norm(nnx.GroupNorm, r.c, num_groups=r.groups, p=p, epsilon=1e-5),
    Act: _act,
    MaxPool: lambda f, r, p: partial(nnx.max_pool, window_shape=(r.k, r.k), strides=(r.k, r.k)),
    Upsample: lambda f, r, p: partial(upsample, k=r.k),
    Flatten: lambda f, r, p: flatten,
    GlobalMeanPool: lambda f, r, p: global_mean_pool,
    Mean: lambda f, r, p: jnp.mean,
    Residual: lambda f, r, p: ResidualBlock(_build(r.layers, f, p)),
    Concat: lambda f, r, p: ConcatBlock(_build(r.layers, f, p)),
    Embed: lambda f, r, p: nnx.Embed(r.vocab, r.dim, embedding_init=f.w(p + "embedding"), param_dtype=f.dtype,
                                     rngs=f.rngs),
    PosEmbed: lambda f, r, p: PosEmbedding(f.array(p + "embedding")),
    ToTokens: lambda f, r, p: to_tokens,
    ClassToken: lambda f, r, p: ClassTokenBlock(f.array(p + "token")),
    Token: lambda f, r, p: partial(token, index=r.index),
    Attention: lambda f, r, p: SelfAttention(f.linear(r.dim, 3 * r.dim, p + "qkv."), f.linear(r.dim, r.dim, p + "out."),
                                             r.heads, r.causal),
    LSTM: _lstm,
    MatmulChain: lambda f, r, p: MatmulChainBlock(r.depth, *(f.array(p + k) for k in ("w1", "b1", "w2", "b2"))),
}


def _build(layers: tuple, f: _From, prefix: str = "") -> nnx.Sequential:
    """nnx layers whose initializers return the given weights, so paths are "layers/<i>/kernel" etc."""
    mods = []
    for i, layer in enumerate(layers):
        if type(layer) not in BUILDERS:
            raise unsupported("jax", layer)
        mods.append(BUILDERS[type(layer)](f, layer, f"{prefix}{i}."))
    return nnx.Sequential(*mods)


def dtype(precision: str):
    return jnp.dtype(DTYPES[precision])


def make_model(spec: ModelSpec, params: dict[str, np.ndarray], precision: str, train: bool) -> nnx.Sequential:
    """The model in train or eval mode, its weights the spec's canonical ones, on the default device."""
    model = _build(spec.layers, _From(params, dtype(precision)))
    model.train() if train else model.eval()
    return model

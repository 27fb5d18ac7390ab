"""The model as nnx layers, built from the spec's numpy weights (channels-last), in train or eval mode."""
from __future__ import annotations

from functools import partial

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


def _build(layers: tuple, params: dict[str, np.ndarray], dtype, prefix: str = "") -> nnx.Sequential:
    """nnx layers whose initializers return the given weights, so paths are "layers/<i>/kernel" etc."""
    rngs = nnx.Rngs(0)  # required by the constructors; every initializer below ignores it

    def w(key: str):
        return lambda _rng, _shape, _dtype: jnp.asarray(params[key], dtype)

    def linear(din: int, dout: int, key: str) -> nnx.Linear:
        return nnx.Linear(din, dout, kernel_init=w(key + "kernel"), bias_init=w(key + "bias"), param_dtype=dtype,
                          rngs=rngs)

    def norm(cls, *args, p: str, bias: bool = True, **kw):
        # Two-pass variance as torch: flax's default E[x²]−E[x]² lost 30% of the loss of mlp_batchnorm at batch 2
        # in fp32 (8.95 vs a float64 reference of 6.83). eps as torch's defaults (flax's LayerNorm/GroupNorm: 1e-6).
        init = {"scale_init": w(p + "scale")} | ({"bias_init": w(p + "bias")} if bias else {})
        return cls(*args, use_fast_variance=False, param_dtype=dtype, rngs=rngs, **init, **kw)

    mods = []
    for i, layer in enumerate(layers):
        p = f"{prefix}{i}."
        match layer:
            case Dense(din, dout):
                mods.append(linear(din, dout, p))
            case Conv(cin, cout, k, stride, pad, bias, groups):
                init = {"kernel_init": w(p + "kernel")} | ({"bias_init": w(p + "bias")} if bias else {})
                mods.append(nnx.Conv(cin, cout, pair(k), strides=stride, padding=[(q, q) for q in pair(pad)],
                                     feature_group_count=groups, use_bias=bias, param_dtype=dtype, rngs=rngs, **init))
            case BatchNorm(c):
                bn = norm(nnx.BatchNorm, c, p=p, momentum=0.9, epsilon=1e-5)  # flax 0.9 == torch 0.1
                bn.mean[...] = jnp.asarray(params[p + "mean"], dtype)
                bn.var[...] = jnp.asarray(params[p + "var"], dtype)
                mods.append(bn)
            case LayerNorm(c):
                mods.append(norm(nnx.LayerNorm, c, p=p, epsilon=1e-5))
            case RMSNorm(c):
                mods.append(norm(nnx.RMSNorm, c, p=p, bias=False, epsilon=1e-6))
            case GroupNorm(groups, c):
                mods.append(norm(nnx.GroupNorm, c, num_groups=groups, p=p, epsilon=1e-5))
            case Act(fn) if fn in ACTS:
                mods.append(ACTS[fn])
            case MaxPool(k):
                mods.append(partial(nnx.max_pool, window_shape=(k, k), strides=(k, k)))
            case Upsample(k):
                mods.append(partial(upsample, k=k))
            case Flatten():
                mods.append(flatten)
            case GlobalMeanPool():
                mods.append(global_mean_pool)
            case Mean():
                mods.append(jnp.mean)
            case Residual(inner):
                mods.append(ResidualBlock(_build(inner, params, dtype, p)))
            case Concat(inner):
                mods.append(ConcatBlock(_build(inner, params, dtype, p)))
            case Embed(vocab, dim):
                mods.append(nnx.Embed(vocab, dim, embedding_init=w(p + "embedding"), param_dtype=dtype, rngs=rngs))
            case PosEmbed():
                mods.append(PosEmbedding(jnp.asarray(params[p + "embedding"], dtype)))
            case ToTokens():
                mods.append(to_tokens)
            case ClassToken():
                mods.append(ClassTokenBlock(jnp.asarray(params[p + "token"], dtype)))
            case Token(index):
                mods.append(partial(token, index=index))
            case Attention(dim, heads, causal):
                mods.append(SelfAttention(linear(dim, 3 * dim, p + "qkv."), linear(dim, dim, p + "out."), heads,
                                          causal))
            case LSTM(din, hidden):
                cell = nnx.LSTMCell(din, hidden, param_dtype=dtype, rngs=rngs)
                for gate in LSTM_GATES:  # flax's cell: one Linear per gate and side, the bias on the hidden side
                    for side in ("i", "h"):
                        key = f"{p}cell.{lstm_name(side, gate)}."
                        lin = getattr(cell, lstm_name(side, gate))
                        lin.kernel[...] = jnp.asarray(params[key + "kernel"], dtype)
                        if side == "h":
                            lin.bias[...] = jnp.asarray(params[key + "bias"], dtype)
                mods.append(LSTMBlock(cell))
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

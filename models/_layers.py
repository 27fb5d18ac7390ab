"""The layer DSL's records (each built natively by every backend: experiments/measure/backends/*_layers.py), their
parameters' keys and shapes, and the canonical weight init both frameworks start from."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from models._weights import LSTM_GATES, lstm_name

# Parameters are a flat dict {"<layer index path>.<name>": float32 array}, e.g. "0.kernel", "2.3.scale",
# "1.1.qkv.kernel": Dense/Conv "kernel" (in, out) / HWIO and "bias"; BatchNorm "scale", "bias" and running
# "mean", "var"; LayerNorm/GroupNorm "scale", "bias", RMSNorm "scale"; Embed/PosEmbed "embedding"; ClassToken
# "token"; Attention "qkv.kernel" (d, 3d: q, k, v side by side), "qkv.bias", "out.kernel", "out.bias"; LSTM
# "cell.<ii|if_|ig|io>.kernel" (in, h) and "cell.<hi|hf|hg|ho>.kernel" (h, h) with their "bias" (one per gate: flax's
# LSTMCell); MatmulChain "w1", "b1", "w2", "b2". Inputs are channels-last and Flatten enumerates (h, w, c) row-major.
STATS = ("mean", "var")  # BatchNorm running statistics: state, not trainable parameters


@dataclass(frozen=True)
class Dense:
    din: int
    dout: int  # on (..., din): every position of a sequence alike


@dataclass(frozen=True)
class Conv:
    cin: int
    cout: int
    k: int | tuple[int, int]  # kernel (square, or (kh, kw))
    stride: int = 1
    pad: int | tuple[int, int] = 0  # symmetric zero padding per axis; 0 is Flux's default 'valid'
    bias: bool = True
    groups: int = 1  # grouped convolution; groups == cin == cout: depthwise


@dataclass(frozen=True)
class BatchNorm:
    """eps 1e-5; running = 0.9·running + 0.1·batch (torch momentum 0.1 == flax momentum 0.9)."""

    c: int


@dataclass(frozen=True)
class LayerNorm:
    """eps 1e-5 (torch's default; flax's is 1e-6) and the two-pass variance on both sides."""

    d: int


@dataclass(frozen=True)
class RMSNorm:
    """x / sqrt(mean(x²) + 1e-6) · scale, no bias (torch's default eps is the dtype's epsilon: set on both sides)."""

    d: int


@dataclass(frozen=True)
class GroupNorm:
    """`groups` groups of consecutive channels, eps 1e-5 (flax's default is 1e-6), two-pass variance."""

    groups: int
    c: int


@dataclass(frozen=True)
class Act:
    fn: str  # relu; gelu_tanh (the tanh approximation, as Flux prints); gelu (exact, erf); silu


@dataclass(frozen=True)
class MaxPool:
    k: int  # window and stride


@dataclass(frozen=True)
class Upsample:
    k: int  # nearest-neighbour, by an integer factor per axis: each pixel becomes a k×k block


@dataclass(frozen=True)
class Flatten:
    pass


@dataclass(frozen=True)
class GlobalMeanPool:
    pass  # (h, w, c) -> (c,)


@dataclass(frozen=True)
class Mean:
    pass  # everything -> one scalar, seed 004's final o.mean()


@dataclass(frozen=True)
class Residual:
    layers: tuple  # x + layers(x), no activation after the add (the seed's Parallel(+))


@dataclass(frozen=True)
class Concat:
    layers: tuple  # [x, layers(x)] side by side on the channel (last) axis: U-Net's skip around its inner levels


@dataclass(frozen=True)
class Embed:
    vocab: int  # integer tokens (length,) -> (length, dim)
    dim: int


@dataclass(frozen=True)
class PosEmbed:
    length: int  # a learned (length, dim) table added to the tokens
    dim: int


@dataclass(frozen=True)
class ToTokens:
    pass  # (h, w, c) -> (h·w, c), row-major: after a Conv of kernel = stride = p, ViT's patch embedding


@dataclass(frozen=True)
class ClassToken:
    dim: int  # (n, dim) -> (n + 1, dim): a learned token put first (ViT's [class])


@dataclass(frozen=True)
class Token:
    index: int  # (n, dim) -> (dim,): one position, e.g. 0 (the class token) or -1 (an LSTM's last step)


@dataclass(frozen=True)
class Attention:
    """Multi-head self-attention on (length, dim): one fused qkv projection, the frameworks' fused scaled dot
    product (jax.nn.dot_product_attention, torch's scaled_dot_product_attention), an output projection."""

    dim: int
    heads: int
    causal: bool = False


@dataclass(frozen=True)
class LSTM:
    """(length, din) -> (length, hidden), gates i, f, g, o, a zero initial state."""

    din: int
    hidden: int


@dataclass(frozen=True)
class MatmulChain:
    """Seed 004: depth × o = (o @ w1 − b1) @ w2 − b2, with constant weights ones/n."""

    n: int
    depth: int


Layer = (Dense | Conv | BatchNorm | LayerNorm | RMSNorm | GroupNorm | Act | MaxPool | Upsample | Flatten
         | GlobalMeanPool | Mean | Residual | Concat | Embed | PosEmbed | ToTokens | ClassToken | Token | Attention
         | LSTM | MatmulChain)


def pair(v: int | tuple[int, int]) -> tuple[int, int]:
    return (v, v) if isinstance(v, int) else tuple(v)


def _param_shapes(layers: tuple, prefix: str = "") -> dict[str, tuple[tuple[int, ...], Any]]:
    """key -> (shape, fill): a float is a uniform ±bound (torch's default fan-in init), ("normal", sd) a normal,
    else "ones"/"zeros"/"1/n". The keys come in the layers' order, which `init` draws them in."""
    out: dict[str, tuple[tuple[int, ...], Any]] = {}
    for i, layer in enumerate(layers):
        out |= _layer_shapes(layer, f"{prefix}{i}.")
    return out


def _layer_shapes(layer: Layer, p: str) -> dict[str, tuple[tuple[int, ...], Any]]:
    """One layer's parameters, each key under the layer's prefix `p`."""
    match layer:
        case Dense(din, dout):
            return {p + "kernel": ((din, dout), din**-0.5), p + "bias": ((dout,), din**-0.5)}
        case Conv():
            return _conv_shapes(layer, p)
        case BatchNorm(c):
            return {p + "scale": ((c,), "ones"), p + "bias": ((c,), "zeros"),
                    p + "mean": ((c,), "zeros"), p + "var": ((c,), "ones")}
        case LayerNorm(c) | GroupNorm(_, c):
            return {p + "scale": ((c,), "ones"), p + "bias": ((c,), "zeros")}
        case RMSNorm(c):
            return {p + "scale": ((c,), "ones")}
        case Embed(vocab, dim):
            return {p + "embedding": ((vocab, dim), ("normal", 1.0))}  # torch's nn.Embedding init
        case PosEmbed(length, dim):
            return {p + "embedding": ((length, dim), ("normal", 0.02))}
        case ClassToken(dim):
            return {p + "token": ((dim,), ("normal", 0.02))}
        case Attention(dim, _, _):
            return {p + "qkv.kernel": ((dim, 3 * dim), dim**-0.5), p + "qkv.bias": ((3 * dim,), dim**-0.5),
                    p + "out.kernel": ((dim, dim), dim**-0.5), p + "out.bias": ((dim,), dim**-0.5)}
        case LSTM(din, hidden):
            return _lstm_shapes(din, hidden, p)
        case MatmulChain(n, _):
            return {p + w: (shape, "1/n") for w, shape in
                    (("w1", (n, n)), ("b1", (1, n)), ("w2", (n, n)), ("b2", (1, n)))}
        case Residual(inner) | Concat(inner):
            return _param_shapes(inner, p)
    return {}


def _conv_shapes(conv: Conv, p: str) -> dict[str, tuple[tuple[int, ...], Any]]:
    (kh, kw), fan_in = pair(conv.k), conv.cin // conv.groups * math.prod(pair(conv.k))
    out = {p + "kernel": ((kh, kw, conv.cin // conv.groups, conv.cout), fan_in**-0.5)}
    if conv.bias:
        out[p + "bias"] = ((conv.cout,), fan_in**-0.5)
    return out


def _lstm_shapes(din: int, hidden: int, p: str) -> dict[str, tuple[tuple[int, ...], Any]]:
    """torch's init: every weight uniform ±1/sqrt(hidden); the input side's kernels first, then the hidden side's
    kernel and bias gate by gate."""
    out = {f"{p}cell.{lstm_name('i', gate)}.kernel": ((din, hidden), hidden**-0.5) for gate in LSTM_GATES}
    for gate in LSTM_GATES:
        out[f"{p}cell.{lstm_name('h', gate)}.kernel"] = ((hidden, hidden), hidden**-0.5)
        out[f"{p}cell.{lstm_name('h', gate)}.bias"] = ((hidden,), hidden**-0.5)
    return out


def _fill(shape: tuple[int, ...], fill, rng: np.random.Generator) -> np.ndarray:
    if isinstance(fill, float):
        return rng.uniform(-fill, fill, shape).astype(np.float32)
    if isinstance(fill, tuple):
        return (rng.standard_normal(shape) * fill[1]).astype(np.float32)
    value = {"ones": 1.0, "zeros": 0.0, "1/n": 1 / shape[-1]}[fill]
    return np.full(shape, value, np.float32)


def is_stat(key: str) -> bool:
    return key.rsplit(".", 1)[-1] in STATS

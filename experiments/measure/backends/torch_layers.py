"""The model as nn layers, built from the spec's numpy weights in NCHW / OIHW / (out, in) layouts."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Callable

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from experiments.measure.backends import DTYPES, unsupported
from models import (LSTM, LSTM_GATES, Act, Attention, BatchNorm, ClassToken, Concat, Conv, Dense, Embed, Flatten,
                    GlobalMeanPool, GroupNorm, LayerNorm, MatmulChain, MaxPool, Mean, ModelSpec, PosEmbed, RMSNorm,
                    Residual, Token, ToTokens, Upsample, lstm_name, pair)

ACTS = {"relu": nn.ReLU, "gelu_tanh": partial(nn.GELU, approximate="tanh"), "gelu": nn.GELU, "silu": nn.SiLU}
HWIO_TO_OIHW, OIHW_TO_HWIO = (3, 2, 0, 1), (2, 3, 1, 0)
# One weight: canonical key, its module and attribute, and how to turn a torch-layout array back into canonical.
Link = tuple[str, nn.Module, str, Callable[[np.ndarray], np.ndarray]]


def same(a: np.ndarray) -> np.ndarray:
    return a


class ResidualBlock(nn.Module):
    def __init__(self, body: nn.Module):
        super().__init__()
        self.body = body

    def forward(self, x):
        return x + self.body(x)


class ConcatBlock(nn.Module):
    def __init__(self, body: nn.Module, dim: int):
        super().__init__()
        self.body, self.dim = body, dim

    def forward(self, x):
        return torch.cat([x, self.body(x)], dim=self.dim)


class MatmulChainBlock(nn.Module):
    """Seed 004's loop; the weights are buffers: constants, never trained."""

    def __init__(self, depth: int, w1, b1, w2, b2):
        super().__init__()
        self.depth = depth
        for name, a in zip(("w1", "b1", "w2", "b2"), (w1, b1, w2, b2)):
            self.register_buffer(name, torch.from_numpy(a))

    def forward(self, o):
        for _ in range(self.depth):
            o = torch.matmul(o, self.w1) - self.b1
            o = o @ self.w2 - self.b2
        return o


class GlobalMeanPool2d(nn.Module):
    def forward(self, x):
        return x.mean(dim=(2, 3))


class MeanAll(nn.Module):
    def forward(self, x):
        return x.mean()


class PosEmbedding(nn.Module):
    def __init__(self, length: int, dim: int):
        super().__init__()
        self.embedding = nn.Parameter(torch.empty(length, dim))

    def forward(self, x):
        return x + self.embedding


class ClassTokenBlock(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.token = nn.Parameter(torch.empty(dim))

    def forward(self, x):
        return torch.cat([self.token.expand(x.shape[0], 1, -1), x], dim=1)


class ToTokens2d(nn.Module):
    def forward(self, x):
        return x.flatten(2).transpose(1, 2)  # NCHW -> (N, H·W, C), row-major as channels-last


class TokenAt(nn.Module):
    def __init__(self, index: int):
        super().__init__()
        self.index = index

    def forward(self, x):
        return x[:, self.index]


class SelfAttention(nn.Module):
    """Multi-head self-attention: one qkv projection (q, k, v side by side), torch's fused scaled dot product
    (F.scaled_dot_product_attention: on the CPU its flash kernel), an output projection."""

    def __init__(self, dim: int, heads: int, causal: bool):
        super().__init__()
        self.qkv, self.out, self.heads, self.causal = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim), heads, causal

    def forward(self, x):
        n, length, d = x.shape
        q, k, v = self.qkv(x).view(n, length, 3 * self.heads, d // self.heads).transpose(1, 2).chunk(3, dim=1)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)
        return self.out(o.transpose(1, 2).reshape(n, length, d))


class LSTMLayer(nn.Module):
    """nn.LSTM (batch first), its outputs at every step."""

    def __init__(self, din: int, hidden: int):
        super().__init__()
        self.lstm = nn.LSTM(din, hidden, batch_first=True)

    def forward(self, x):
        return self.lstm(x)[0]


def dense_layout(hwc: tuple[int, ...] | None):
    """(to torch, back) for a Dense kernel; after Flatten its rows are permuted from (h, w, c) to NCHW's (c, h, w)."""
    if hwc is None:
        return (lambda k: k.T), (lambda w: w.T)
    h, w, c = hwc
    return (lambda k: k.reshape(h, w, c, -1).transpose(3, 2, 0, 1).reshape(k.shape[1], -1),
            lambda t: t.reshape(-1, c, h, w).transpose(2, 3, 1, 0).reshape(h * w * c, -1))


@dataclass
class _From:
    """What every builder below reads and adds to: the canonical weights, and a Link per weight copied from them."""

    params: dict[str, np.ndarray]
    links: list[Link] = field(default_factory=list)

    def put(self, m: nn.Module, attr: str, key: str, to=same, back=same):
        with torch.no_grad():
            getattr(m, attr).copy_(torch.from_numpy(np.ascontiguousarray(to(self.params[key]))))
        self.links.append((key, m, attr, back))

    def affine(self, m: nn.Module, p: str, bias: bool = True):
        self.put(m, "weight", p + "scale")
        if bias:
            self.put(m, "bias", p + "bias")
        return m

    def linear(self, m: nn.Linear, p: str):
        self.put(m, "weight", p + "kernel", lambda a: a.T, lambda a: a.T)
        self.put(m, "bias", p + "bias")


@dataclass
class _Shape:
    """The per-sample shape (channels-last) reaching a layer, and the (h, w, c) a Flatten consumed, for the Dense
    after it; each builder moves them on."""

    now: tuple[int, ...]
    flat_from: tuple[int, ...] | None = None


def _dense(f: _From, r: Dense, p: str, s: _Shape):
    m = nn.Linear(r.din, r.dout)
    f.put(m, "weight", p + "kernel", *dense_layout(s.flat_from))
    f.put(m, "bias", p + "bias")
    s.flat_from, s.now = None, (*s.now[:-1], r.dout)
    return m


def _conv(f: _From, r: Conv, p: str, s: _Shape):
    m = nn.Conv2d(r.cin, r.cout, pair(r.k), r.stride, pair(r.pad), groups=r.groups, bias=r.bias)
    f.put(m, "weight", p + "kernel", lambda a: a.transpose(HWIO_TO_OIHW), lambda a: a.transpose(OIHW_TO_HWIO))
    if r.bias:
        f.put(m, "bias", p + "bias")
    s.now = tuple((n + 2 * q - kk) // r.stride + 1 for n, kk, q in zip(s.now[:2], pair(r.k), pair(r.pad))) + (r.cout,)
    return m


def _batch_norm(f: _From, r: BatchNorm, p: str, s: _Shape):
    # torch momentum 0.1 == flax 0.9. torch updates running_var with the unbiased batch variance, flax with the
    # biased one: only the running stats after training differ, not the outputs in parity.
    m = f.affine((nn.BatchNorm2d if len(s.now) == 3 else nn.BatchNorm1d)(r.c, eps=1e-5, momentum=0.1), p)
    f.put(m, "running_mean", p + "mean")
    f.put(m, "running_var", p + "var")
    return m


def _act(f: _From, r: Act, p: str, s: _Shape):
    if r.fn not in ACTS:
        raise unsupported("torch", r)
    return ACTS[r.fn]()


def _then(m: nn.Module, s: _Shape, shape: tuple[int, ...]) -> nn.Module:
    """A layer without weights that changes the shape to `shape`."""
    s.now = shape
    return m


def _residual(f: _From, r: Residual, p: str, s: _Shape):
    return ResidualBlock(_build(r.layers, f, _Shape(s.now), p))


def _concat(f: _From, r: Concat, p: str, s: _Shape):
    inner = _Shape(s.now)
    m = ConcatBlock(_build(r.layers, f, inner, p), dim=1 if len(s.now) == 3 else -1)  # images: NCHW's channels
    s.now = (*s.now[:-1], s.now[-1] + inner.now[-1])
    return m


def _embed(f: _From, r: Embed, p: str, s: _Shape):
    m = nn.Embedding(r.vocab, r.dim)
    f.put(m, "weight", p + "embedding")
    return _then(m, s, (*s.now, r.dim))


def _pos_embed(f: _From, r: PosEmbed, p: str, s: _Shape):
    m = PosEmbedding(r.length, r.dim)
    f.put(m, "embedding", p + "embedding")
    return m


def _class_token(f: _From, r: ClassToken, p: str, s: _Shape):
    m = ClassTokenBlock(r.dim)
    f.put(m, "token", p + "token")
    return _then(m, s, (s.now[0] + 1, r.dim))


def _attention(f: _From, r: Attention, p: str, s: _Shape):
    m = SelfAttention(r.dim, r.heads, r.causal)
    f.linear(m.qkv, p + "qkv.")
    f.linear(m.out, p + "out.")
    return m


def _lstm(f: _From, r: LSTM, p: str, s: _Shape):
    m = LSTMLayer(r.din, r.hidden)
    f.links += lstm_weights(m.lstm, f.params, p, r.hidden)
    return _then(m, s, (s.now[0], r.hidden))


def _matmul_chain(f: _From, r: MatmulChain, p: str, s: _Shape):
    m = MatmulChainBlock(r.depth, *(f.params[p + k] for k in ("w1", "b1", "w2", "b2")))
    f.links += [(p + k, m, k, same) for k in ("w1", "b1", "w2", "b2")]
    return m


# One builder per layer record: (weights, the record, its key prefix, the shape so far) -> an nn.Module.
BUILDERS: dict[type, Callable[[_From, Any, str, _Shape], nn.Module]] = {
    Dense: _dense,
    Conv: _conv,
    BatchNorm: _batch_norm,
    LayerNorm: lambda f, r, p, s: f.affine(nn.LayerNorm(r.d, eps=1e-5), p),
    RMSNorm: lambda f, r, p, s: f.affine(nn.RMSNorm(r.d, eps=1e-6), p, bias=False),
    GroupNorm: lambda f, r, p, s: f.affine(nn.GroupNorm(r.groups, r.c, eps=1e-5), p),
    Act: _act,
    MaxPool: lambda f, r, p, s: _then(nn.MaxPool2d(r.k), s, (s.now[0] // r.k, s.now[1] // r.k, s.now[2])),
    Upsample: lambda f, r, p, s: _then(nn.Upsample(scale_factor=r.k, mode="nearest"), s,
                                       (s.now[0] * r.k, s.now[1] * r.k, s.now[2])),
    Flatten: lambda f, r, p, s: _flatten(s),
    GlobalMeanPool: lambda f, r, p, s: _then(GlobalMeanPool2d(), s, s.now[-1:]),
    Mean: lambda f, r, p, s: _then(MeanAll(), s, ()),
    Residual: _residual,
    Concat: _concat,
    Embed: _embed,
    PosEmbed: _pos_embed,
    ToTokens: lambda f, r, p, s: _then(ToTokens2d(), s, (s.now[0] * s.now[1], s.now[2])),
    ClassToken: _class_token,
    Token: lambda f, r, p, s: _then(TokenAt(r.index), s, s.now[1:]),
    Attention: _attention,
    LSTM: _lstm,
    MatmulChain: _matmul_chain,
}


def _flatten(s: _Shape) -> nn.Module:
    s.flat_from = s.now
    return _then(nn.Flatten(), s, (math.prod(s.now),))


def _build(layers: tuple, f: _From, shape: _Shape, prefix: str = "") -> nn.Sequential:
    """nn.Sequential for a channels-last per-sample `shape` (moved on to the output's), adding a Link per weight
    to `f.links` (for canonical grads)."""
    mods: list[nn.Module] = []
    for i, layer in enumerate(layers):
        if type(layer) not in BUILDERS:
            raise unsupported("torch", layer)
        mods.append(BUILDERS[type(layer)](f, layer, f"{prefix}{i}.", shape))
    return nn.Sequential(*mods)


def lstm_weights(lstm: nn.LSTM, params: dict[str, np.ndarray], p: str, hidden: int) -> list[Link]:
    """The canonical per-gate weights (flax's LSTMCell) stacked into torch's weight_ih_l0, weight_hh_l0 (gates i,
    f, g, o) and bias_ih_l0. torch's second bias, bias_hh_l0, is held at zero and not trained: only the sum of the
    two biases enters the cell, and flax's cell has one, so the two compute the same function with the same
    trainable parameters (and take the same Adam steps)."""
    links: list[Link] = []
    for attr, side, part in (("weight_ih_l0", "i", "kernel"), ("weight_hh_l0", "h", "kernel"),
                             ("bias_ih_l0", "h", "bias")):
        keys = [f"{p}cell.{lstm_name(side, g)}.{part}" for g in LSTM_GATES]
        with torch.no_grad():
            getattr(lstm, attr).copy_(torch.from_numpy(np.concatenate([params[k].T for k in keys])))
        for j, key in enumerate(keys):
            links.append((key, lstm, attr, lambda a, j=j: a[j * hidden:(j + 1) * hidden].T))
    with torch.no_grad():
        lstm.bias_hh_l0.zero_()
    lstm.bias_hh_l0.requires_grad_(False)
    return links


def dtype(precision: str) -> torch.dtype:
    return getattr(torch, DTYPES[precision])


def make_model(spec: ModelSpec, params: dict[str, np.ndarray], precision: str, train: bool) -> nn.Sequential:
    """The model in train or eval mode, its weights the spec's canonical ones, on the CPU; `model.links` maps
    each weight back to its canonical key and layout."""
    weights = _From(params)
    model = _build(spec.layers, weights, _Shape(spec.input_shape)).to(dtype=dtype(precision)).train(train)
    model.links = weights.links
    return model

"""The model as nn layers, built from the spec's numpy weights in NCHW / OIHW / (out, in) layouts."""
from __future__ import annotations

import math
from functools import partial
from typing import Callable

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


def _build(layers: tuple, params: dict[str, np.ndarray], shape: tuple[int, ...], prefix: str = ""):
    """nn.Sequential for a channels-last per-sample `shape`, plus a Link per weight (for canonical grads), and the
    output's per-sample shape (channels-last)."""
    mods: list[nn.Module] = []
    links: list[Link] = []

    def put(m: nn.Module, attr: str, key: str, to=same, back=same):
        with torch.no_grad():
            getattr(m, attr).copy_(torch.from_numpy(np.ascontiguousarray(to(params[key]))))
        links.append((key, m, attr, back))

    def affine(m: nn.Module, p: str, bias: bool = True):
        put(m, "weight", p + "scale")
        if bias:
            put(m, "bias", p + "bias")
        return m

    def linear(m: nn.Linear, p: str):
        put(m, "weight", p + "kernel", lambda a: a.T, lambda a: a.T)
        put(m, "bias", p + "bias")

    flat_from = None  # the (h, w, c) shape a Flatten consumed, for the Dense after it
    for i, layer in enumerate(layers):
        p = f"{prefix}{i}."
        match layer:
            case Dense(din, dout):
                m = nn.Linear(din, dout)
                put(m, "weight", p + "kernel", *dense_layout(flat_from))
                put(m, "bias", p + "bias")
                flat_from, shape = None, (*shape[:-1], dout)
            case Conv(cin, cout, k, stride, pad, bias, groups):
                m = nn.Conv2d(cin, cout, pair(k), stride, pair(pad), groups=groups, bias=bias)
                put(m, "weight", p + "kernel", lambda a: a.transpose(HWIO_TO_OIHW), lambda a: a.transpose(OIHW_TO_HWIO))
                if bias:
                    put(m, "bias", p + "bias")
                shape = tuple((n + 2 * q - kk) // stride + 1 for n, kk, q in zip(shape[:2], pair(k), pair(pad))) + (cout,)
            case BatchNorm(c):
                # torch momentum 0.1 == flax 0.9. torch updates running_var with the unbiased batch variance, flax
                # with the biased one: only the running stats after training differ, not the outputs in parity.
                m = affine((nn.BatchNorm2d if len(shape) == 3 else nn.BatchNorm1d)(c, eps=1e-5, momentum=0.1), p)
                put(m, "running_mean", p + "mean")
                put(m, "running_var", p + "var")
            case LayerNorm(c):
                m = affine(nn.LayerNorm(c, eps=1e-5), p)
            case RMSNorm(c):
                m = affine(nn.RMSNorm(c, eps=1e-6), p, bias=False)
            case GroupNorm(groups, c):
                m = affine(nn.GroupNorm(groups, c, eps=1e-5), p)
            case Act(fn) if fn in ACTS:
                m = ACTS[fn]()
            case MaxPool(k):
                m = nn.MaxPool2d(k)
                shape = (shape[0] // k, shape[1] // k, shape[2])
            case Upsample(k):
                m = nn.Upsample(scale_factor=k, mode="nearest")
                shape = (shape[0] * k, shape[1] * k, shape[2])
            case Flatten():
                m, flat_from, shape = nn.Flatten(), shape, (math.prod(shape),)
            case GlobalMeanPool():
                m, shape = GlobalMeanPool2d(), shape[-1:]
            case Mean():
                m, shape = MeanAll(), ()
            case Residual(inner):
                body, inner_links, _ = _build(inner, params, shape, p)
                m = ResidualBlock(body)
                links += inner_links
            case Concat(inner):
                body, inner_links, out = _build(inner, params, shape, p)
                m = ConcatBlock(body, dim=1 if len(shape) == 3 else -1)  # images: NCHW's channels
                links += inner_links
                shape = (*shape[:-1], shape[-1] + out[-1])
            case Embed(vocab, dim):
                m = nn.Embedding(vocab, dim)
                put(m, "weight", p + "embedding")
                shape = (*shape, dim)
            case PosEmbed(length, dim):
                m = PosEmbedding(length, dim)
                put(m, "embedding", p + "embedding")
            case ToTokens():
                m, shape = ToTokens2d(), (shape[0] * shape[1], shape[2])
            case ClassToken(dim):
                m = ClassTokenBlock(dim)
                put(m, "token", p + "token")
                shape = (shape[0] + 1, dim)
            case Token(index):
                m, shape = TokenAt(index), shape[1:]
            case Attention(dim, heads, causal):
                m = SelfAttention(dim, heads, causal)
                linear(m.qkv, p + "qkv.")
                linear(m.out, p + "out.")
            case LSTM(din, hidden):
                m = LSTMLayer(din, hidden)
                links += lstm_weights(m.lstm, params, p, hidden)
                shape = (shape[0], hidden)
            case MatmulChain(_, depth):
                m = MatmulChainBlock(depth, *(params[p + k] for k in ("w1", "b1", "w2", "b2")))
                links += [(p + k, m, k, same) for k in ("w1", "b1", "w2", "b2")]
            case _:
                raise unsupported("torch", layer)
        mods.append(m)
    return nn.Sequential(*mods), links, shape


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
    model, links, _ = _build(spec.layers, params, spec.input_shape)
    model = model.to(dtype=dtype(precision)).train(train)
    model.links = links
    return model

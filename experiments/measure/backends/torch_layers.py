"""The model as nn layers, built from the spec's numpy weights in NCHW / OIHW / (out, in) layouts."""
from __future__ import annotations

import math
from functools import partial
from typing import Callable

import numpy as np
import torch
from torch import nn

from experiments.measure.backends import DTYPES, unsupported
from models import (Act, BatchNorm, Conv, Dense, Flatten, GlobalMeanPool, MatmulChain, MaxPool, Mean, ModelSpec,
                    Residual)

ACTS = {"relu": nn.ReLU, "gelu_tanh": partial(nn.GELU, approximate="tanh")}
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


def dense_layout(hwc: tuple[int, ...] | None):
    """(to torch, back) for a Dense kernel; after Flatten its rows are permuted from (h, w, c) to NCHW's (c, h, w)."""
    if hwc is None:
        return (lambda k: k.T), (lambda w: w.T)
    h, w, c = hwc
    return (lambda k: k.reshape(h, w, c, -1).transpose(3, 2, 0, 1).reshape(k.shape[1], -1),
            lambda t: t.reshape(-1, c, h, w).transpose(2, 3, 1, 0).reshape(h * w * c, -1))


# BatchNorm's tensors and their canonical names. torch momentum 0.1 == flax 0.9. torch updates running_var with the
# unbiased batch variance, flax with the biased one: only the running stats after training differ, not the outputs.
BATCHNORM_WEIGHTS = (("weight", "scale"), ("bias", "bias"), ("running_mean", "mean"), ("running_var", "var"))


def _build(layers: tuple, params: dict[str, np.ndarray], shape: tuple[int, ...], prefix: str = ""):
    """nn.Sequential for a channels-last per-sample `shape`, plus a Link per weight (for canonical grads)."""
    mods: list[nn.Module] = []
    links: list[Link] = []

    def put(m: nn.Module, attr: str, key: str, to=same, back=same):
        with torch.no_grad():
            getattr(m, attr).copy_(torch.from_numpy(np.ascontiguousarray(to(params[key]))))
        links.append((key, m, attr, back))

    flat_from = None  # the (h, w, c) shape a Flatten consumed, for the Dense after it
    for i, layer in enumerate(layers):
        p = f"{prefix}{i}."
        match layer:
            case Dense(din, dout):
                m = nn.Linear(din, dout)
                put(m, "weight", p + "kernel", *dense_layout(flat_from))
                put(m, "bias", p + "bias")
                flat_from, shape = None, (dout,)
            case Conv(cin, cout, k, stride, pad, bias):
                m = nn.Conv2d(cin, cout, k, stride, pad, bias=bias)
                put(m, "weight", p + "kernel", lambda a: a.transpose(HWIO_TO_OIHW), lambda a: a.transpose(OIHW_TO_HWIO))
                if bias:
                    put(m, "bias", p + "bias")
                shape = tuple((n + 2 * pad - k) // stride + 1 for n in shape[:2]) + (cout,)
            case BatchNorm(c):
                m = (nn.BatchNorm2d if len(shape) == 3 else nn.BatchNorm1d)(c, eps=1e-5, momentum=0.1)
                for attr, name in BATCHNORM_WEIGHTS:
                    put(m, attr, p + name)
            case Act(fn) if fn in ACTS:
                m = ACTS[fn]()
            case MaxPool(k):
                m, shape = nn.MaxPool2d(k), (shape[0] // k, shape[1] // k, shape[2])
            case Flatten():
                m, flat_from, shape = nn.Flatten(), shape, (math.prod(shape),)
            case GlobalMeanPool():
                m, shape = GlobalMeanPool2d(), shape[-1:]
            case Mean():
                m, shape = MeanAll(), ()
            case Residual(inner):
                body, inner_links = _build(inner, params, shape, p)
                m = ResidualBlock(body)
                links += inner_links
            case MatmulChain(_, depth):
                m = MatmulChainBlock(depth, *(params[p + k] for k in ("w1", "b1", "w2", "b2")))
                links += [(p + k, m, k, same) for k in ("w1", "b1", "w2", "b2")]
            case _:
                raise unsupported("torch", layer)
        mods.append(m)
    return nn.Sequential(*mods), links


def dtype(precision: str) -> torch.dtype:
    return getattr(torch, DTYPES[precision])


def make_model(spec: ModelSpec, params: dict[str, np.ndarray], precision: str, train: bool) -> nn.Sequential:
    """The model in train or eval mode, its weights the spec's canonical ones, on the CPU; `model.links` maps
    each weight back to its canonical key and layout."""
    model, links = _build(spec.layers, params, spec.input_shape)
    model = model.to(dtype=dtype(precision)).train(train)
    model.links = links
    return model

"""Models as data: layer records, the ModelSpec contract, and `load(name)` by naming convention."""
from __future__ import annotations

import inspect
import math
import pkgutil
from dataclasses import dataclass, field
from importlib import import_module

import numpy as np

# Parameters are a flat dict {"<layer index path>.<name>": float32 array}, e.g. "0.kernel", "2.3.scale":
# Dense/Conv "kernel" (in, out) / HWIO and "bias"; BatchNorm "scale", "bias" and running "mean", "var";
# MatmulChain "w1", "b1", "w2", "b2". Inputs are channels-last and Flatten enumerates (h, w, c) row-major.
STATS = ("mean", "var")  # BatchNorm running statistics: state, not trainable parameters


@dataclass(frozen=True)
class Dense:
    din: int
    dout: int


@dataclass(frozen=True)
class Conv:
    cin: int
    cout: int
    k: int
    stride: int = 1
    pad: int = 0  # symmetric zero padding; 0 is Flux's default 'valid'
    bias: bool = True


@dataclass(frozen=True)
class BatchNorm:
    """eps 1e-5; running = 0.9·running + 0.1·batch (torch momentum 0.1 == flax momentum 0.9)."""

    c: int


@dataclass(frozen=True)
class Act:
    fn: str  # "relu" or "gelu_tanh" (the tanh approximation on both sides, as Flux prints)


@dataclass(frozen=True)
class MaxPool:
    k: int  # window and stride


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
class MatmulChain:
    """Seed 004: depth × o = (o @ w1 − b1) @ w2 − b2, with constant weights ones/n."""

    n: int
    depth: int


Layer = Dense | Conv | BatchNorm | Act | MaxPool | Flatten | GlobalMeanPool | Mean | Residual | MatmulChain


def _param_shapes(layers: tuple, prefix: str = "") -> dict[str, tuple[tuple[int, ...], float | str]]:
    """key -> (shape, fill): a float is a uniform ±bound (torch's default fan-in init), else "ones"/"zeros"/"1/n"."""
    out: dict[str, tuple[tuple[int, ...], float | str]] = {}
    for i, layer in enumerate(layers):
        p = f"{prefix}{i}."
        match layer:
            case Dense(din, dout):
                out |= {p + "kernel": ((din, dout), din**-0.5), p + "bias": ((dout,), din**-0.5)}
            case Conv(cin, cout, k, _, _, bias):
                out[p + "kernel"] = ((k, k, cin, cout), (cin * k * k) ** -0.5)
                if bias:
                    out[p + "bias"] = ((cout,), (cin * k * k) ** -0.5)
            case BatchNorm(c):
                out |= {p + "scale": ((c,), "ones"), p + "bias": ((c,), "zeros"),
                        p + "mean": ((c,), "zeros"), p + "var": ((c,), "ones")}
            case MatmulChain(n, _):
                out |= {p + w: (shape, "1/n") for w, shape in
                        (("w1", (n, n)), ("b1", (1, n)), ("w2", (n, n)), ("b2", (1, n)))}
            case Residual(inner):
                out |= _param_shapes(inner, p)
    return out


def _fill(shape: tuple[int, ...], fill: float | str, rng: np.random.Generator) -> np.ndarray:
    if isinstance(fill, float):
        return rng.uniform(-fill, fill, shape).astype(np.float32)
    value = {"ones": 1.0, "zeros": 0.0, "1/n": 1 / shape[-1]}[fill]
    return np.full(shape, value, np.float32)


def is_stat(key: str) -> bool:
    return key.rsplit(".", 1)[-1] in STATS


@dataclass(frozen=True)
class ModelSpec:
    """One model, declared once as data; each backend builds it with its own layers."""

    name: str
    layers: tuple
    input_shape: tuple[int, ...]  # per sample, channels-last
    batch_sizes: dict[str, tuple[int, ...]] = field(hash=False)  # the seed's lists, per op
    loss: str = "sse"  # "sse": sum((ŷ−y)²); "mean": mean(ŷ) (seed 004)
    trainable: bool = True  # False: constant weights, "grad" is w.r.t. the input and "training" is unsupported

    @property
    def out_dim(self) -> int:
        dense = [layer for layer in self.layers if isinstance(layer, Dense)]
        return dense[-1].dout if dense else 0

    def init(self, seed: int) -> dict[str, np.ndarray]:
        """Canonical float32 weights, identical for every framework given the seed."""
        rng = np.random.default_rng(seed)
        return {k: _fill(shape, fill, rng) for k, (shape, fill) in _param_shapes(self.layers).items()}

    def param_count(self) -> int:
        """Weights without BatchNorm running stats (matmul_chain: its constant weights)."""
        return sum(math.prod(shape) for k, (shape, _) in _param_shapes(self.layers).items() if not is_stat(k))

    def make_batch(self, batch: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
        """x ~ N(0,1) and targets y ~ N(0,1); matmul_chain: x = ones as in seed 004, y empty (unused)."""
        if not self.trainable:
            return np.ones((batch, *self.input_shape), np.float32), np.zeros((batch, 0), np.float32)
        rng = np.random.default_rng([seed, batch])  # not the weights' stream
        x = rng.standard_normal((batch, *self.input_shape), np.float32)
        return x, rng.standard_normal((batch, self.out_dim), np.float32)


def available() -> list[str]:
    return sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_"))


def load(name: str, **keys) -> ModelSpec:
    """Build `models.<name>`; adding a model is adding one file with a `build(**keys)`."""
    if name not in available():
        raise ValueError(f"unknown model {name!r}; available: {', '.join(available())}")
    build = import_module(f"{__name__}.{name}").build
    params = inspect.signature(build).parameters
    if unknown := sorted(set(keys) - set(params)):
        raise ValueError(f"model {name!r} has no key {', '.join(unknown)}; its keys: {', '.join(params) or 'none'}")
    for k, v in keys.items():  # a size the model declares as an int (matmul_chain's n, m) is one, > 0
        if type(params[k].default) is int and not (type(v) is int and v > 0):
            raise ValueError(f"model.{k} must be a positive integer (got {v!r}): "
                             f"use e.g. model.{k}={params[k].default}")
    return build(**keys)

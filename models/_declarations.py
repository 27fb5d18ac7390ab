"""What a model declares: `Model` (its input, target, loss and batch sizes), `ModelSpec` (the layer DSL's, with its
canonical weights) and `Network` (a user's own torch/Flax NNX modules, with the weight map that pairs them), and
`Source`, where a user's network's code comes from."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import numpy as np

from models._data import Input, Labels, NextToken, Target, _sample
from models._layers import _fill, _param_shapes, is_stat
from models._weights import Entry, From, entry

# The ops a batch-size list may name: the same names as experiments.common.config.OPS (tests/models checks it).
OPS = ("inference", "training", "grad")


@dataclass(frozen=True, kw_only=True)
class Model:
    """What every model declares, the DSL's and a user's alike: its input, its target and loss, its batch sizes."""

    name: str = ""
    input: Input | None = None
    target: Target | None = None
    loss: str | None = None
    batch_sizes: dict[str, tuple[int, ...]] | None = field(default=None, hash=False)  # the lists a sweep runs, per op
    trainable: bool = True  # False: constant weights, "grad" is w.r.t. the input and "training" is unsupported

    @property
    def input_shape(self) -> tuple[int, ...]:
        return self.input.shape

    @property
    def output_shape(self) -> tuple[int, ...]:
        """Per sample, what the loss expects of the output (cross-entropy: one logit per class at each position)."""
        match self.target:
            case Labels(classes, shape):
                return (*shape, classes)
            case NextToken():
                return (self.input.length, self.input.vocab)
            case None:
                return ()
        return self.target.shape

    def make_batch(self, batch: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
        """(x, y), identical for every framework given the seed; y is empty when the loss takes no target."""
        rng = np.random.default_rng([seed, batch])  # not the weights' stream
        if isinstance(self.target, NextToken):
            seq = rng.integers(0, self.input.vocab, (batch, self.input.length + 1), np.int32)
            return np.ascontiguousarray(seq[:, :-1]), np.ascontiguousarray(seq[:, 1:])
        x = _sample(self.input, batch, rng)
        return x, _sample(self.target, batch, rng) if self.target else np.zeros((batch, 0), np.float32)


@dataclass(frozen=True, kw_only=True)
class ModelSpec(Model):
    """One model of the layer DSL, declared once as data; each backend builds it with its own layers."""

    layers: tuple

    def init(self, seed: int) -> dict[str, np.ndarray]:
        """Canonical float32 weights, identical for every framework given the seed."""
        rng = np.random.default_rng(seed)
        return {k: _fill(shape, fill, rng) for k, (shape, fill) in _param_shapes(self.layers).items()}

    def param_count(self) -> int:
        """Weights without BatchNorm running stats (matmul_chain: its constant weights)."""
        return sum(math.prod(shape) for k, (shape, _) in _param_shapes(self.layers).items() if not is_stat(k))



@dataclass(frozen=True)
class Source:
    """Where a network's code comes from, so a change to it is a change of the point: a file and its content's
    hash, or an installed package and its version."""

    kind: str  # "file" or "package"
    where: str  # the file's absolute path, or "<distribution> (<entry point value>)"
    version: str  # the file's sha256 (first 16 hex digits), or the package's version


@dataclass(frozen=True, kw_only=True)
class Network(Model):
    """A user's own network, as `build(**keys)` returns it: a torch builder and/or a Flax NNX builder (each a
    zero-argument callable returning the module, e.g. a class or a functools.partial), and what `Model` declares.

    The torch module takes images as NCHW, the Flax one as NHWC (each framework's own layout); tokens and arrays
    come as declared. `weights` maps each Flax parameter path ("layers.0.kernel", as nnx.state flattens it) to
    the torch parameter or buffer it is read from: its name ("0.weight"), (name, axes) with an np.transpose, or a
    `From` (rows of a packed parameter, reshaped, or a function of it); `attention`, `encoder_layer` and `lstm`
    give a whole layer's entries. It buys a parity check. `flops(op, batch)`, where given, is the count
    per call that every framework's MFU is computed from.
    """

    torch: Callable[[], Any] | None = None
    flax: Callable[[], Any] | None = None
    weights: Mapping[str, Entry] | None = field(default=None, hash=False)
    flops: Callable[[str, int], int] | None = None
    source: Source | None = None  # set by `load`
    params: dict[str, int] = field(default_factory=dict, hash=False)  # trainable parameters per builder, set by `load`

    def param_count(self) -> int:
        """The torch side's count where there is one, else the Flax side's (`params` has both)."""
        return next(iter(self.params.values()), 0)

    def weight_map(self) -> dict[str, From]:
        """flax path -> how it is read from torch, every form of entry as a `From`."""
        return {k: entry(k, v) for k, v in (self.weights or {}).items()}

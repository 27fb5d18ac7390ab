"""What a model is fed and judged on, made by nnbench: the input and target records, the losses and the targets each
takes, and the seeded numpy batches, the same arrays for both frameworks."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Image:
    """Float images ~ N(0,1), channels-last (h, w, c) here and in jax; torch gets them NCHW (framework.memory_format)."""

    h: int
    w: int
    c: int

    @property
    def shape(self) -> tuple[int, ...]:
        return (self.h, self.w, self.c)


@dataclass(frozen=True)
class Array:
    """Floats of any per-sample shape in the run's precision, the same layout for every framework; ~ N(0,1), or
    ones (seed 004's input)."""

    shape: tuple[int, ...]
    fill: str = "normal"  # normal or ones


@dataclass(frozen=True)
class Tokens:
    """Integer ids uniform in [0, vocab), (length,) per sample; never cast to the run's precision."""

    length: int
    vocab: int

    @property
    def shape(self) -> tuple[int, ...]:
        return (self.length,)


@dataclass(frozen=True)
class Labels:
    """A cross-entropy target: integer classes in [0, classes), one per sample (shape ()) or per position."""

    classes: int
    shape: tuple[int, ...] = ()


@dataclass(frozen=True)
class NextToken:
    """A language model's target: the input tokens shifted by one (y[t] = x[t+1]); one class per vocabulary entry."""


Input = Image | Array | Tokens
Target = Image | Array | Labels | NextToken
# A loss and the targets it takes: sse = sum((ŷ−y)²) (seed 000); mean = mean(ŷ), no target (seed 004);
# cross_entropy = the mean over samples (and positions) of −log softmax(ŷ)[y], on integer labels.
LOSSES: dict[str, tuple[type, ...]] = {"sse": (Image, Array), "mean": (), "cross_entropy": (Labels, NextToken)}


def _sample(what, batch: int, rng: np.random.Generator) -> np.ndarray:
    match what:
        case Image() | Array(_, "normal"):
            return rng.standard_normal((batch, *what.shape), np.float32)
        case Array(shape, _):
            return np.ones((batch, *shape), np.float32)
        case Tokens(length, vocab):
            return rng.integers(0, vocab, (batch, length), np.int32)
        case Labels(classes, shape):
            return rng.integers(0, classes, (batch, *shape), np.int32)
    raise TypeError(f"nnbench can't make {what!r}")

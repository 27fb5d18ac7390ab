"""A classifier of token sequences built from each framework's own transformer layer: torch's
nn.TransformerEncoderLayer against a Flax block of nnx.MultiHeadAttention, nnx.Linear and nnx.LayerNorm."""
import functools

import torch
from flax import nnx

import models


class TorchEncoder(torch.nn.Module):
    def __init__(self, vocab, dim, heads, depth, classes):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, dim)
        self.layers = torch.nn.ModuleList(
            torch.nn.TransformerEncoderLayer(dim, heads, dim_feedforward=4 * dim, dropout=0.0, activation="gelu",
                                             batch_first=True)
            for _ in range(depth))
        self.head = torch.nn.Linear(dim, classes)

    def forward(self, tokens):
        x = self.embed(tokens)
        for layer in self.layers:
            x = layer(x)
        return self.head(x.mean(1))


class FlaxEncoderLayer(nnx.Module):
    """torch's post-norm encoder layer, its parts named as torch names them."""

    def __init__(self, dim, heads, rngs):
        self.self_attn = nnx.MultiHeadAttention(heads, dim, decode=False, rngs=rngs)
        self.linear1, self.linear2 = nnx.Linear(dim, 4 * dim, rngs=rngs), nnx.Linear(4 * dim, dim, rngs=rngs)
        self.norm1 = nnx.LayerNorm(dim, epsilon=1e-5, use_fast_variance=False, rngs=rngs)
        self.norm2 = nnx.LayerNorm(dim, epsilon=1e-5, use_fast_variance=False, rngs=rngs)

    def __call__(self, x):
        x = self.norm1(x + self.self_attn(x))
        return self.norm2(x + self.linear2(nnx.gelu(self.linear1(x), approximate=False)))


class FlaxEncoder(nnx.Module):
    def __init__(self, vocab, dim, heads, depth, classes, rngs):
        self.embed = nnx.Embed(vocab, dim, rngs=rngs)
        self.layers = nnx.List([FlaxEncoderLayer(dim, heads, rngs) for _ in range(depth)])
        self.head = nnx.Linear(dim, classes, rngs=rngs)

    def __call__(self, tokens):
        x = self.embed(tokens)
        for layer in self.layers:
            x = layer(x)
        return self.head(x.mean(1))


def build(vocab: int = 64, length: int = 16, dim: int = 32, heads: int = 4, depth: int = 2, classes: int = 10):
    weights = {"embed.embedding": "embed.weight", "head.kernel": "head.weight", "head.bias": "head.bias"}
    for i in range(depth):
        weights |= models.encoder_layer(f"layers.{i}", f"layers.{i}", dim, heads)
    sizes = (vocab, dim, heads, depth, classes)
    return models.Network(torch=functools.partial(TorchEncoder, *sizes),
                          flax=lambda: FlaxEncoder(*sizes, rngs=nnx.Rngs(0)),
                          input=models.Tokens(length, vocab), target=models.Labels(classes), loss="cross_entropy",
                          batch_sizes={"inference": (8, 64), "training": (64,)}, weights=weights)

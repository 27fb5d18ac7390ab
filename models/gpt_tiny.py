"""A decoder-only language model (GPT-style): token and learned position embeddings, pre-LN blocks of causal
self-attention and a GELU MLP, a final LayerNorm and a head over the vocabulary, trained on next-token
cross-entropy. causal=False: the same network with bidirectional attention, a BERT-style encoder (same loss).

The CPU default is 2 blocks of width 128 on 64 tokens; `conf/model/gpt_tiny.yaml` gives a GPU the size of
nanoGPT's character-level model (6 blocks, 6 heads, width 384, 256 tokens). No weight tying, no dropout.
"""
from models import Dense, Embed, LayerNorm, ModelSpec, NextToken, PosEmbed, Tokens
from models._transformer import blocks


def build(vocab: int = 256, length: int = 64, width: int = 128, depth: int = 2, heads: int = 4,
          causal: bool = True):
    layers = (Embed(vocab, width), PosEmbed(length, width), *blocks(depth, width, heads, causal),
              LayerNorm(width), Dense(width, vocab))
    sizes = {"inference": (1, 4, 16), "training": (2, 8), "grad": (2, 8)}
    return ModelSpec(name="gpt_tiny", layers=layers, input=Tokens(length, vocab), target=NextToken(),
                     loss="cross_entropy", batch_sizes=sizes)

"""Models: the networks nnbench measures, declared once as data for every framework. A built-in model is one public
module `models/<name>.py` with a `build(**keys)` (and `conf/model/<name>.yaml`); the modules that start with `_`
hold the rest, each by its role, and this file re-exports what models, backends and users' networks use:

- `_layers`: the layer DSL's records (Dense, Conv, ..., Attention, LSTM, MatmulChain), their parameters' keys and
  shapes, and the canonical weight init;
- `_data`: what a model is fed and judged on (Image, Array, Tokens; Labels, NextToken), the losses, seeded batches;
- `_declarations`: `Model`, `ModelSpec` (the layer DSL's), `Network` (a user's own torch/Flax NNX modules), `Source`;
- `_weights`: a weight map's entries (`From`) and the maps of attention, an encoder layer and an LSTM;
- `_registry`: finding a model by name and importing its code (built-ins, entry points `nnbench.models`,
  `model=file`): `available`, `installed`, `names`, `preload`;
- `_load`: `declared` and `load`, the checks a declaration passes at the door (`known`: a network checked already);
- `_check`: a user's network built once without computing, its weight map checked (imported only by `load`);
- `_mlp`, `_transformer`: parts the built-in models share.
"""
from __future__ import annotations

from models._data import LOSSES, Array, Image, Input, Labels, NextToken, Target, Tokens
from models._declarations import OPS, Model, ModelSpec, Network, Source
from models._layers import (LSTM, STATS, Act, Attention, BatchNorm, ClassToken, Concat, Conv, Dense, Embed, Flatten,
                            GlobalMeanPool, GroupNorm, Layer, LayerNorm, MatmulChain, MaxPool, Mean, PosEmbed, Residual,
                            RMSNorm, Token, ToTokens, Upsample, is_stat, pair)
from models._load import declared, known, load
from models._registry import ENTRY_POINTS, FILE, available, installed, names, preload
from models._weights import LSTM_GATES, Entry, From, attention, encoder_layer, entry, lstm_cell, lstm_name

__all__ = [
    # _layers
    "Dense", "Conv", "BatchNorm", "LayerNorm", "RMSNorm", "GroupNorm", "Act", "MaxPool", "Upsample", "Flatten",
    "GlobalMeanPool", "Mean", "Residual", "Concat", "Embed", "PosEmbed", "ToTokens", "ClassToken", "Token",
    "Attention", "LSTM", "MatmulChain", "Layer", "STATS", "pair", "is_stat",
    # _data
    "Image", "Array", "Tokens", "Labels", "NextToken", "Input", "Target", "LOSSES",
    # _declarations
    "Model", "ModelSpec", "Network", "Source", "OPS",
    # _weights
    "From", "Entry", "entry", "attention", "encoder_layer", "lstm_cell", "lstm_name", "LSTM_GATES",
    # _registry and _load
    "available", "installed", "names", "preload", "declared", "known", "load", "ENTRY_POINTS", "FILE",
]

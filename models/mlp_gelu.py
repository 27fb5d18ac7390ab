"""7-layer MLP with GELU, the tanh form on both sides (seed 000's Flux prints gelu_tanh)."""
from models._mlp import mlp


def build():
    return mlp("mlp_gelu", "gelu_tanh")

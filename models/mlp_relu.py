"""7-layer MLP with relu (seed 000): Dense 32→256 relu, 5× Dense 256→256 relu, Dense 256→10."""
from models._mlp import mlp


def build():
    return mlp("mlp_relu", "relu")

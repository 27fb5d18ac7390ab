"""7-layer MLP (seed 000) with BatchNorm then relu after each hidden Dense; the Dense keeps its bias, as in Flux."""
from models._mlp import mlp


def build():
    return mlp("mlp_batchnorm", "relu", batchnorm=True)

"""Seed 004's matmul chain: depth × ((x @ w1 − b1) @ w2 − b2) with weights ones/n, then the mean."""
from models import Array, MatmulChain, Mean, ModelSpec


def build(n: int = 1000, m: int = 100, depth: int = 10):
    """m is the rows of x, i.e. the batch; the weights are constants, so grad is w.r.t. x as in the seed."""
    layers = (MatmulChain(n, depth), Mean())
    return ModelSpec(name="matmul_chain", layers=layers, input=Array((n,), fill="ones"), target=None, loss="mean",
                     batch_sizes={"inference": (m,), "training": (), "grad": (m,)}, trainable=False)

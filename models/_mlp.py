"""The seed's 7-layer MLP family (not a model itself: the mlp_* files pick the variant)."""
from __future__ import annotations

from models import Act, Array, BatchNorm, Dense, ModelSpec

BATCH_SIZES = {"inference": (2, 8, 32, 128, 512, 2048), "training": (32, 128, 512, 2048)}


def mlp(name: str, act: str, batchnorm: bool = False) -> ModelSpec:
    """Dense 32→256, 5× Dense 256→256, Dense 256→10; `act` (or BatchNorm+relu) after each hidden Dense."""
    hidden = (BatchNorm(256), Act("relu")) if batchnorm else (Act(act),)
    layers = [Dense(32, 256), *hidden]
    for _ in range(5):
        layers += [Dense(256, 256), *hidden]
    layers.append(Dense(256, 10))
    sizes = BATCH_SIZES | {"grad": BATCH_SIZES["training"]}
    return ModelSpec(name=name, layers=tuple(layers), input=Array((32,)), target=Array((10,)), loss="sse",
                     batch_sizes=sizes)

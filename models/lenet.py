"""LeNet-5 (seed 000) on 28×28×1: conv5 1→6 relu, pool, conv5 6→16 relu, pool, Dense 256→120→84→10."""
from models import Act, Array, Conv, Dense, Flatten, Image, MaxPool, ModelSpec


def build():
    relu = Act("relu")
    layers = (Conv(1, 6, 5), relu, MaxPool(2), Conv(6, 16, 5), relu, MaxPool(2), Flatten(),
              Dense(256, 120), relu, Dense(120, 84), relu, Dense(84, 10))
    sizes = {"inference": (2, 8, 32, 128), "training": (32, 128), "grad": (32, 128)}
    return ModelSpec(name="lenet", layers=layers, input=Image(28, 28, 1), target=Array((10,)), loss="sse",
                     batch_sizes=sizes)

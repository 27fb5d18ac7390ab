"""Small ResNet (seed 000) on 32×32×3: stem conv+BN, one residual block, strided conv, conv+BN, mean pool, Dense."""
from models import Act, Array, BatchNorm, Conv, Dense, GlobalMeanPool, Image, ModelSpec, Residual


def conv3(cin: int, cout: int, stride: int = 1) -> Conv:
    return Conv(cin, cout, 3, stride, pad=1, bias=False)


def build():
    relu = Act("relu")
    block = Residual((conv3(64, 64), BatchNorm(64), relu, conv3(64, 64), BatchNorm(64)))
    layers = (conv3(3, 64), BatchNorm(64), relu, block, conv3(64, 128, stride=2), BatchNorm(128), relu,
              conv3(128, 128), BatchNorm(128), GlobalMeanPool(), Dense(128, 10))
    sizes = {"inference": (2, 8, 32), "training": (8, 32), "grad": (8, 32)}
    return ModelSpec(name="resnet", layers=layers, input=Image(32, 32, 3), target=Array((10,)), loss="sse",
                     batch_sizes=sizes)

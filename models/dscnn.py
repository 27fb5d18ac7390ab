"""MLPerf Tiny's keyword-spotting DS-CNN on 49×10×1 MFCC features: conv 10×4 stride 2 (64 channels), then 4 ×
[depthwise 3×3, pointwise 1×1], each conv followed by BatchNorm and relu, a global mean pool, 12 classes.

The reference pads the first conv 'same' (4 rows above, 5 below); here it is symmetric (5 rows, 1 column), which
gives the same 25×5 output. Its two dropout layers are left out: no framework can match another's random stream.
The model is the benchmark's own size: the same on a GPU.
"""
from models import Act, BatchNorm, Conv, Dense, GlobalMeanPool, Image, Labels, ModelSpec


def build(channels: int = 64, classes: int = 12):
    c, relu = channels, Act("relu")
    layers = [Conv(1, c, (10, 4), stride=2, pad=(5, 1)), BatchNorm(c), relu]
    for _ in range(4):
        layers += [Conv(c, c, 3, pad=1, groups=c), BatchNorm(c), relu, Conv(c, c, 1), BatchNorm(c), relu]
    layers += [GlobalMeanPool(), Dense(c, classes)]
    sizes = {"inference": (1, 8, 32), "training": (8, 32), "grad": (8, 32)}
    return ModelSpec(name="dscnn", layers=tuple(layers), input=Image(49, 10, 1), target=Labels(classes),
                     loss="cross_entropy", batch_sizes=sizes)

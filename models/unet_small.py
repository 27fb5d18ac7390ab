"""A small U-Net, image to image: three levels of [conv3, GroupNorm, SiLU] × 2, max-pool down, nearest upsampling
up, the encoder's features concatenated to the decoder's at each level, a 1×1 conv to 3 channels, trained on the
squared error against a target image.

The CPU default is width 16 on 32×32×3; `conf/model/unet_small.yaml` gives a GPU width 64 on 64×64×3.
"""
from models import Act, Concat, Conv, GroupNorm, Image, MaxPool, ModelSpec, Upsample


def level(cin: int, cout: int, groups: int) -> tuple:
    silu = Act("silu")
    return (Conv(cin, cout, 3, pad=1), GroupNorm(groups, cout), silu,
            Conv(cout, cout, 3, pad=1), GroupNorm(groups, cout), silu)


def build(size: int = 32, width: int = 16, groups: int = 8):
    if size % 4 or width % groups:
        raise ValueError(f"model.size={size} must be a multiple of 4 and model.width={width} of model.groups={groups}")
    c = width
    bottom = (MaxPool(2), *level(2 * c, 4 * c, groups), Upsample(2))  # 4c at size/4, back to size/2
    middle = (MaxPool(2), *level(c, 2 * c, groups), Concat(bottom), *level(6 * c, 2 * c, groups), Upsample(2))
    layers = (*level(3, c, groups), Concat(middle), *level(3 * c, c, groups), Conv(c, 3, 1))
    sizes = {"inference": (1, 4, 16), "training": (4, 16), "grad": (4, 16)}
    return ModelSpec(name="unet_small", layers=layers, input=Image(size, size, 3), target=Image(size, size, 3),
                     loss="sse", batch_sizes=sizes)

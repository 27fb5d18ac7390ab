"""A Vision Transformer at ViT-Ti width (192, 3 heads, MLP 768) on 32×32×3: 4×4 patches by a strided conv (64
tokens), a class token, learned position embeddings, pre-LN blocks, a final LayerNorm, the class token to a
classifier, cross-entropy on integer labels.

ViT-Ti has 12 blocks: that is the GPU size (`conf/model/vit_tiny.yaml`); the CPU default is 2. No dropout.
"""
from models import ClassToken, Conv, Dense, Image, Labels, LayerNorm, ModelSpec, PosEmbed, Token, ToTokens
from models._transformer import blocks


def build(depth: int = 2, width: int = 192, heads: int = 3, patch: int = 4, classes: int = 10):
    if 32 % patch:
        raise ValueError(f"model.patch={patch} must divide the image's 32 pixels: e.g. model.patch=4")
    tokens = (32 // patch) ** 2
    layers = (Conv(3, width, patch, stride=patch), ToTokens(), ClassToken(width), PosEmbed(tokens + 1, width),
              *blocks(depth, width, heads, causal=False), LayerNorm(width), Token(0), Dense(width, classes))
    sizes = {"inference": (1, 4, 16), "training": (4, 16), "grad": (4, 16)}
    return ModelSpec(name="vit_tiny", layers=layers, input=Image(32, 32, 3), target=Labels(classes),
                     loss="cross_entropy", batch_sizes=sizes)

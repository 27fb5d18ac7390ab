"""The pre-LN transformer block gpt_tiny and vit_tiny share (not a model itself)."""
from __future__ import annotations

from models import Act, Attention, Dense, LayerNorm, Residual


def blocks(depth: int, width: int, heads: int, causal: bool) -> tuple:
    """`depth` × [x + attention(LN(x)), x + MLP(LN(x))], the MLP width → 4·width → width with exact GELU."""
    if width % heads:
        raise ValueError(f"model.heads={heads} must divide model.width={width}: e.g. model.heads={_divisor(width)}")
    attend = Residual((LayerNorm(width), Attention(width, heads, causal)))
    mlp = Residual((LayerNorm(width), Dense(width, 4 * width), Act("gelu"), Dense(4 * width, width)))
    return (attend, mlp) * depth


def _divisor(width: int) -> int:
    return next(h for h in (4, 3, 2, 1) if width % h == 0)

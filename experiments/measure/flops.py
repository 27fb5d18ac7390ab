"""FLOPs of one call of an op: the numerator of achieved TFLOP/s and MFU, one number for every framework.

A model of the layer DSL is counted from its layers (`flops`; `flops_source` "dsl"). What is counted (a
multiply-add is 2 FLOPs, as `torch.utils.flop_counter` and XLA's `cost_analysis` count):
- forward: the matmuls of Dense (2·batch·positions·din·dout, every position of a sequence), Conv
  (2·batch·Ho·Wo·cout·kh·kw·cin/groups, every kernel tap, those on zero padding included), Attention (its qkv
  and output projections as Dense, and the two matmuls of the fused scaled dot product, scores and values,
  2·batch·length²·dim each, over every position pair even when causal: the fused kernels and XLA compute the
  masked half too), LSTM (4 gates × (din + hidden) × hidden per step and sample) and MatmulChain (2 matmuls of
  2·batch·n² per step of its depth);
- backward (ops `grad` and `training`): per matmul/conv layer, the weight gradient (as many FLOPs as its
  forward) where the weights are trained, and the input gradient (as many again) where anything upstream
  needs a gradient. So the first weight layer of a trainable model has no input gradient, and
  matmul_chain (constant weights, grad w.r.t. x) has input gradients only: its grad is 2× its forward. The
  attention's two matmuls have activations on both sides, and the fused kernels recompute the scores: their
  backward is 5 matmuls, 2.5× their forward (torch's formula for its fused kernels). An LSTM's backward is 2× its forward: its weights' gradients, and the gradients of its input and
  of each previous step, which its fused kernels compute whatever is upstream;
- `training` adds Adam's update, ADAM_FLOPS_PER_PARAM per trainable parameter (BatchNorm scale and bias
  included, its running statistics not).

Not counted: bias adds, activations, normalizations (BatchNorm, LayerNorm, RMSNorm, GroupNorm), the softmax
inside attention, pooling, upsampling, embedding lookups (a gather) and their gradients (a scatter-add),
residual adds, concatenations, means and the loss. They are O(activations), not O(activations × fan-in), and
torch's counter leaves them out too, so `flops` equals what `FlopCounterMode` reports for inference and grad
(its training count lacks Adam: it has no formula for the foreach elementwise ops). torch's counter has no
formula for the CPU's fused attention and LSTM kernels: the torch backend registers torch's own formulas for
them. XLA's cost analysis counts every elementwise op (1 per add, mul or max, k²−1 per max-pool window, none
for tanh or sqrt), only the kernel taps that land inside the image (`padding=False` counts taps that way), and
the body of a loop once, whatever its trip count (`loops=False` counts an LSTM's steps that way: one, in each
direction). See tests/measure/test_flops.py for both counters on every model and op.

A user's network (`models.Network`) is counted from its declaration's `flops(op, batch)` where given
("declared"), else by torch's FlopCounterMode on its torch module ("torch"), else by XLA's cost analysis of its
Flax module's jitted step ("xla"), so both frameworks' MFU share one numerator (`source` says which;
`parity.counted` counts, in a process of its own). `flops` answers only what needs no framework (a
measuring worker must not import the other one): the declared count, or None.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from experiments.measure.backends import validate_op
from models import (LSTM, Act, Attention, BatchNorm, ClassToken, Concat, Conv, Dense, Embed, Flatten, GlobalMeanPool,
                    GroupNorm, LayerNorm, MatmulChain, MaxPool, Mean, Model, ModelSpec, Network, PosEmbed, RMSNorm,
                    Residual, Token, ToTokens, Upsample, pair)

# optax.adam per parameter: first moment 3 (2 mul, add), second moment 4 (square, 2 mul, add), two bias
# corrections 2, add eps 1, divide 1, times the learning rate 1, apply 1; the sqrt not counted (torch's foreach
# Adam does about the same work). XLA counts 13.0 per parameter in the jitted step (tests/measure/test_flops.py).
ADAM_FLOPS_PER_PARAM = 13
WEIGHTED = (Dense, Conv, BatchNorm, LayerNorm, RMSNorm, GroupNorm, Embed, PosEmbed, ClassToken, Attention, LSTM)


def _taps(n: int, k: int, stride: int, pad: int, padding: bool) -> tuple[int, int]:
    """(output size, kernel taps summed over the outputs) along one spatial axis."""
    out = (n + 2 * pad - k) // stride + 1
    if padding:
        return out, out * k
    # tap t of output o reads input o·stride − pad + t, which must lie in [0, n)
    return out, sum(min(k, n + pad - o * stride) - max(0, pad - o * stride) for o in range(out))


def _conv(r: Conv, shape, batch: int, padding: bool, loops: bool):
    (h, th), (w, tw) = (_taps(n, kk, r.stride, q, padding) for n, kk, q in zip(shape[:2], pair(r.k), pair(r.pad)))
    return 2 * batch * th * tw * r.cin // r.groups * r.cout, 0, 0, (h, w, r.cout)


def _attention(r: Attention, shape, batch: int, padding: bool, loops: bool):
    length, dim = shape[0], r.dim
    f = 2 * batch * length * dim * 3 * dim  # the qkv projection, as a Dense
    # after it the scores and values, whose backward is torch's 5 matmuls (the fused kernels recompute the
    # scores), and the output projection (its input's and weights' gradients)
    core, out = 2 * (2 * batch * length * length * dim), 2 * batch * length * dim * dim
    return f, core + out, core * 5 // 2 + 2 * out, shape


def _lstm(r: LSTM, shape, batch: int, padding: bool, loops: bool):
    steps = shape[0] if loops else 1
    own = 2 * batch * steps * 4 * r.hidden * (r.din + r.hidden)
    return 0, own, 2 * own, (shape[0], r.hidden)


def _reshape(how):
    """A layer without FLOPs that only changes the shape (`how(record, shape)`)."""
    return lambda r, shape, batch, padding, loops: (0, 0, 0, how(r, shape))


# Per layer record: (record, per-sample shape, batch, padding, loops) -> (f, own, own_back, output shape). f: forward
# FLOPs whose backward the rule in _walk gives; own: forward FLOPs whose backward (own_back) the layer fixes itself.
COUNTS = {
    Dense: lambda r, shape, batch, padding, loops: (2 * batch * math.prod(shape[:-1]) * r.din * r.dout, 0, 0,
                                                    (*shape[:-1], r.dout)),
    Conv: _conv,
    Attention: _attention,
    LSTM: _lstm,
    MatmulChain: lambda r, shape, batch, padding, loops: (r.depth * 2 * (2 * batch * r.n * r.n), 0, 0, shape),
    MaxPool: _reshape(lambda r, s: (s[0] // r.k, s[1] // r.k, s[2])),
    Upsample: _reshape(lambda r, s: (s[0] * r.k, s[1] * r.k, s[2])),
    Flatten: _reshape(lambda r, s: (math.prod(s),)),
    GlobalMeanPool: _reshape(lambda r, s: s[-1:]),
    Mean: _reshape(lambda r, s: ()),
    Embed: _reshape(lambda r, s: (*s, r.dim)),
    ToTokens: _reshape(lambda r, s: (s[0] * s[1], s[2])),
    ClassToken: _reshape(lambda r, s: (s[0] + 1, r.dim)),
    Token: _reshape(lambda r, s: s[1:]),
} | {kind: _reshape(lambda r, s: s) for kind in (Act, BatchNorm, LayerNorm, RMSNorm, GroupNorm, PosEmbed)}


@dataclass(frozen=True)
class Counting:
    """What a count is of and how: `batch` samples, weights trained or constant (`trainable`), the kernel taps on
    zero padding counted (`padding`; XLA's count leaves them out), an LSTM's every step counted (`loops`; XLA's
    counts a loop's body once)."""

    batch: int
    trainable: bool
    padding: bool = True
    loops: bool = True


def _walk(layers: tuple, shape: tuple[int, ...], needs_dx: bool,
          c: Counting) -> tuple[int, int, tuple[int, ...], bool]:
    """(forward, backward) FLOPs of `layers` on a per-sample channels-last `shape`; also the output shape and
    whether a gradient flows out of them (needs_dx: something upstream of them needs one)."""
    fwd = bwd = 0
    for layer in layers:
        if isinstance(layer, (Residual, Concat)):
            f, b, out, needs_dx = _walk(layer.layers, shape, needs_dx, c)
            fwd, bwd = fwd + f, bwd + b
            if isinstance(layer, Concat):
                shape = (*shape[:-1], shape[-1] + out[-1])
            continue
        if type(layer) not in COUNTS:
            raise TypeError(f"no FLOP count for layer {layer!r}: add it to experiments/measure/flops.py")
        f, own, own_back, shape = COUNTS[type(layer)](layer, shape, c.batch, c.padding, c.loops)
        trained = c.trainable and isinstance(layer, (Dense, Conv, Attention))
        fwd += f + own
        bwd += f * (needs_dx + trained) + own_back * (c.trainable or needs_dx)
        needs_dx = needs_dx or (c.trainable and isinstance(layer, WEIGHTED))
    return fwd, bwd, shape, needs_dx


def flops(spec: Model, op: str, batch: int, padding: bool = True, loops: bool = True) -> int | None:
    """FLOPs of one call of `op` at `batch`, the same for every framework, so achieved TFLOP/s compare like for
    like; raises as the backends do for an op the model can't run (training constant weights). A user's network:
    its declared count, else None (`parity.counted` asks a framework's counter)."""
    validate_op(spec, op)
    if isinstance(spec, Network):
        return spec.flops(op, batch) if spec.flops else None
    # a constant-weight model is differentiated w.r.t. its input, so a gradient is wanted from the start
    fwd, bwd, _, _ = _walk(spec.layers, spec.input_shape, not spec.trainable,
                           Counting(batch, spec.trainable, padding, loops))
    if op == "inference":
        return fwd
    if op == "grad":
        return fwd + bwd
    return fwd + bwd + ADAM_FLOPS_PER_PARAM * spec.param_count()


def source(spec: Model) -> str:
    """Where a model's FLOPs come from (`flops_source`): its layers, its declaration, or one framework's counter
    for both (experiments/measure/parity.py counts them)."""
    if isinstance(spec, ModelSpec):
        return "dsl"
    if spec.flops:
        return "declared"
    return "torch" if spec.torch is not None else "xla"


def achieved_tflops(flops: int, seconds: float) -> float:
    """TFLOP/s at `seconds` per call of `flops` FLOPs (divided by a peak, it is an MFU)."""
    return flops / seconds / 1e12

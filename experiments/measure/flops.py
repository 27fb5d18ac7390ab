"""Analytic FLOPs of one call of an op, counted from the model's layers: the numerator of achieved TFLOP/s.

What is counted (a multiply-add is 2 FLOPs, as `torch.utils.flop_counter` and XLA's `cost_analysis` count):
- forward: the matmuls of Dense (2·batch·din·dout), Conv (2·batch·Ho·Wo·cout·k²·cin, every kernel tap, those
  on zero padding included) and MatmulChain (2 matmuls of 2·batch·n² per step of its depth);
- backward (ops `grad` and `training`): per matmul/conv layer, the weight gradient (as many FLOPs as its
  forward) where the weights are trained, and the input gradient (as many again) where anything upstream
  needs a gradient. So the first weight layer of a trainable model has no input gradient, and
  matmul_chain (constant weights, grad w.r.t. x) has input gradients only: its grad is 2× its forward;
- `training` adds Adam's update, ADAM_FLOPS_PER_PARAM per trainable parameter (BatchNorm scale and bias
  included, its running statistics not).

Not counted: bias adds, activations, BatchNorm, pooling, residual adds, means and the loss. They are
O(activations), not O(activations × fan-in), and torch's counter leaves them out too, so `flops` equals
what `FlopCounterMode` reports for inference and grad (its training count lacks Adam: it has no formula
for the foreach elementwise ops). XLA's cost analysis counts every elementwise op (1 per add, mul or max,
k²−1 per max-pool window, none for tanh or sqrt) and only the kernel taps that land inside the image;
`padding=False` counts taps that way. See tests/measure/test_flops.py for both counters on every model and op.
"""
from __future__ import annotations

import math

from experiments.measure.backends import validate_op
from models import (Act, BatchNorm, Conv, Dense, Flatten, GlobalMeanPool, MatmulChain, MaxPool, Mean, ModelSpec,
                    Residual)

# optax.adam per parameter: first moment 3 (2 mul, add), second moment 4 (square, 2 mul, add), two bias
# corrections 2, add eps 1, divide 1, times the learning rate 1, apply 1; the sqrt not counted (torch's foreach
# Adam does about the same work). XLA counts 13.0 per parameter in the jitted step (tests/measure/test_flops.py).
ADAM_FLOPS_PER_PARAM = 13


def _taps(n: int, k: int, stride: int, pad: int, padding: bool) -> tuple[int, int]:
    """(output size, kernel taps summed over the outputs) along one spatial axis."""
    out = (n + 2 * pad - k) // stride + 1
    if padding:
        return out, out * k
    # tap t of output o reads input o·stride − pad + t, which must lie in [0, n)
    return out, sum(min(k, n + pad - o * stride) - max(0, pad - o * stride) for o in range(out))


def _walk(layers: tuple, shape: tuple[int, ...], batch: int, trainable: bool, needs_dx: bool,
          padding: bool) -> tuple[int, int, tuple[int, ...], bool]:
    """(forward, backward) FLOPs of `layers` on a per-sample channels-last `shape`; also the output shape and
    whether a gradient flows out of them (needs_dx: something upstream of them needs one)."""
    fwd = bwd = 0
    for layer in layers:
        f = 0
        match layer:
            case Dense(din, dout):
                f, shape = 2 * batch * din * dout, (dout,)
            case Conv(cin, cout, k, stride, pad, _):
                (h, th), (w, tw) = (_taps(n, k, stride, pad, padding) for n in shape[:2])
                f, shape = 2 * batch * th * tw * cin * cout, (h, w, cout)
            case MatmulChain(n, depth):
                f = depth * 2 * (2 * batch * n * n)
            case Residual(inner):
                f, b, _, needs_dx = _walk(inner, shape, batch, trainable, needs_dx, padding)
                fwd, bwd = fwd + f, bwd + b
                continue
            case MaxPool(k):
                shape = (shape[0] // k, shape[1] // k, shape[2])
            case Flatten():
                shape = (math.prod(shape),)
            case GlobalMeanPool():
                shape = shape[-1:]
            case Mean():
                shape = ()
            case Act() | BatchNorm():
                pass
            case _:
                raise TypeError(f"no FLOP count for layer {layer!r}: add it to experiments/measure/flops.py")
        trained = trainable and isinstance(layer, (Dense, Conv))
        fwd += f
        bwd += f * (needs_dx + trained)
        needs_dx = needs_dx or (trainable and isinstance(layer, (Dense, Conv, BatchNorm)))
    return fwd, bwd, shape, needs_dx


def flops(spec: ModelSpec, op: str, batch: int, padding: bool = True) -> int:
    """FLOPs of one call of `op` at `batch`, the same for every framework, so achieved TFLOP/s compare like for
    like; raises as the backends do for an op the model can't run (training constant weights)."""
    validate_op(spec, op)
    # a constant-weight model is differentiated w.r.t. its input, so a gradient is wanted from the start
    fwd, bwd, _, _ = _walk(spec.layers, spec.input_shape, batch, spec.trainable, not spec.trainable, padding)
    if op == "inference":
        return fwd
    if op == "grad":
        return fwd + bwd
    return fwd + bwd + ADAM_FLOPS_PER_PARAM * spec.param_count()


def achieved_tflops(flops: int, seconds: float) -> float:
    """TFLOP/s at `seconds` per call of `flops` FLOPs (divided by a peak, it is an MFU)."""
    return flops / seconds / 1e12

"""Analytic FLOPs (experiments.flops) against torch's FlopCounterMode and XLA's cost analysis, every model and op."""
from __future__ import annotations

import contextlib
from functools import cache

import pytest

import models
from experiments.measure.backends import Unsupported, load
from experiments.common.config import OPS
from experiments.measure.flops import ADAM_FLOPS_PER_PARAM, achieved_tflops, flops
from experiments.common.protocol import Setup
from models import Conv, ModelSpec
from tests.helpers import tiny

BATCH = 4
SEED = 0
CASES = [(name, op) for name in models.available() for op in OPS if op != "training" or tiny(name).trainable]
TRAINABLE = [name for name in models.available() if tiny(name).trainable]


class _GlobalOnly(contextlib.nullcontext):
    """All that FlopCounterMode asks of its module tracker when only the global total is kept."""

    parents = {"Global"}


@cache
def torch_flops(name: str, op: str) -> int:
    """FlopCounterMode around one call of the op as the torch backend runs it (eager, fp32, CPU), after a first.

    Its per-module tracker is swapped for a no-op: its hooks break torch.autograd.grad w.r.t. a leaf input
    (matmul_chain's grad: "A leaf node was passed to _will_engine_execute_node", pytorch/pytorch#131753), and
    only the global total is wanted.
    """
    from torch.utils.flop_counter import FlopCounterMode

    backend = load("torch")
    backend.configure(Setup("fp32", "cpu"))
    step = backend.prepare(tiny(name), op, BATCH, SEED)
    step.fn()
    counter = FlopCounterMode(display=False)
    counter.mod_tracker = _GlobalOnly()
    with counter:
        step.fn()
    return counter.get_total_flops()


@cache
def xla_flops(name: str, op: str) -> int:
    """XLA's count for the pure function the jax backend jits for the op, built from its helpers as
    `Backend.prepare` builds it (the state passed as pytrees rather than flat leaves: the same computation)."""
    import jax
    import optax
    from flax import nnx

    from experiments.measure.backends import jax_backend as jb

    spec = tiny(name)
    with jax.default_device(jax.devices("cpu")[0]):  # XLA:CPU's cost model, on any machine
        x, y = (jb.to_input(a, "fp32", None) for a in spec.make_batch(BATCH, SEED))
        model = jb.make_model(spec, spec.init(SEED), "fp32", train=op != "inference")
        graphdef, p, rest = jb.split(model)
        if op == "inference":
            f, args = (lambda p, rest, x: nnx.merge(graphdef, p, rest)(x)), (p, rest, x)
        elif op == "grad":
            f, args = jb.make_grad(spec, jb.make_loss(spec, model)), (p, rest, x, y)
        else:
            tx = optax.adam(1e-3)
            f, args = jb.make_train_step(jb.make_loss(spec, model), tx), ((p, rest, tx.init(p)), x, y)
        cost = jax.jit(f).lower(*args).compile().cost_analysis()  # a dict in jax 0.10, a list of dicts before
    return int((cost[0] if isinstance(cost, list) else cost)["flops"])


def adam(name: str) -> int:
    return ADAM_FLOPS_PER_PARAM * tiny(name).param_count()


@pytest.mark.parametrize("name,op", CASES)
def test_torch_counter_agrees_exactly(name, op):
    # Both count 2 FLOPs per multiply-add of mm/addmm/convolution(_backward) and nothing elementwise, so they
    # agree exactly (lenet grad at batch 32: 48,545,280 both). torch's counter has no formula for Adam's foreach
    # ops, so its training count is its grad count. Exact, not within 2%: a first layer given an input gradient
    # would add only 0.8% to an MLP's grad.
    expected = flops(tiny(name), op, BATCH) - (adam(name) if op == "training" else 0)
    assert torch_flops(name, op) == expected


@pytest.mark.parametrize("name,op", CASES)
def test_xla_counts_the_same_matmuls_plus_elementwise_ops(name, op):
    # XLA counts only the kernel taps inside the image (padding=False) and adds every elementwise op: bias adds,
    # activations, BatchNorm, pools, the loss, their gradients. Those added, at batch 4 (jax 0.10.2), for
    # inference/grad/training: mlp_relu +0.5/0.4/0.3%, mlp_gelu +2.0/2.1/1.4%, mlp_batchnorm +1.3/5.1/3.4% (at
    # batch 32 its grad is +2.6%: BatchNorm's per-feature work does not grow with the batch), lenet +2.3/4.6/4.2%,
    # resnet +0.4/1.1/1.1%, matmul_chain at n=16 +3.6/1.8% (tiny matmuls; at its default n=1000, +0.05/0.03%).
    # The dense count (padding=True) is 4.4–5.1% above XLA's for resnet, whose 3×3 convs are padded: it would fail
    # the lower bound. So would an input gradient for the first layer (+0.8% on an MLP, whose elementwise share
    # is 0.4%), and a missing weight gradient would break the upper bound (Adam's share has its own test).
    inside = flops(tiny(name), op, BATCH, padding=False)
    assert inside <= xla_flops(name, op) <= 1.06 * inside


@pytest.mark.parametrize("name", TRAINABLE)
def test_xla_counts_adam_as_stated(name):
    # The jitted step minus the jitted grad, per parameter at batch 4: lenet 13.001 (577,563 for 44,426), the MLPs
    # 13.000, mlp_batchnorm 13.032 and resnet 13.016 (the running statistics, which the grad op drops, and a few
    # scalar step-count ops).
    assert xla_flops(name, "training") - xla_flops(name, "grad") == pytest.approx(adam(name), rel=0.01)


def test_lenet_by_hand():
    # batch 1: conv 1→6 5×5 to 24×24, conv 6→16 5×5 to 8×8, Dense 256→120→84→10
    conv1, conv2, dense = 2 * 24 * 24 * 6 * 25, 2 * 8 * 8 * 16 * 150, 2 * (256 * 120 + 120 * 84 + 84 * 10)
    spec = models.load("lenet")
    assert flops(spec, "inference", 1) == conv1 + conv2 + dense == 563_280
    # the first conv computes no input gradient, only its weight gradient
    assert flops(spec, "grad", 1) == (conv1 + conv2 + dense) + conv1 + 2 * (conv2 + dense)
    assert flops(spec, "training", 3) == 3 * flops(spec, "grad", 1) + 13 * 44_426
    assert flops(spec, "inference", 7) == 7 * flops(spec, "inference", 1)


def test_matmul_chain_grad_is_input_gradients_only():
    spec = models.load("matmul_chain", n=8, m=2, depth=3)
    assert flops(spec, "inference", 2) == 3 * 2 * (2 * 2 * 8 * 8)
    assert flops(spec, "grad", 2) == 2 * flops(spec, "inference", 2)
    with pytest.raises(Unsupported, match="constant weights"):
        flops(spec, "training", 2)


def test_padding_false_counts_taps_inside_the_image():
    # a 3×3 kernel with padding 1 on 4 pixels: 4 outputs × 3 taps, minus the one tap off each edge
    spec = ModelSpec("one_conv", (Conv(2, 5, 3, pad=1),), (4, 4, 2), {})
    assert flops(spec, "inference", 1) == 2 * (4 * 3) ** 2 * 2 * 5
    assert flops(spec, "inference", 1, padding=False) == 2 * (4 * 3 - 2) ** 2 * 2 * 5
    strided = ModelSpec("strided", (Conv(2, 5, 3, stride=2, pad=1),), (4, 4, 2), {})  # outputs 0 and 1 read -1..1, 1..3
    assert flops(strided, "inference", 1, padding=False) == 2 * (2 * 3 - 1) ** 2 * 2 * 5
    assert flops(tiny("lenet"), "grad", 2, padding=False) == flops(tiny("lenet"), "grad", 2)  # no padding


def test_achieved_tflops():
    assert achieved_tflops(3_000_000_000, 1e-3) == pytest.approx(3.0)

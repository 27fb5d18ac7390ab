"""Analytic FLOPs (experiments.flops) against torch's FlopCounterMode and XLA's cost analysis, every model and op."""
from __future__ import annotations

from functools import cache

import pytest

import models
from experiments.measure.backends import Unsupported, load
from experiments.common.config import OPS
from experiments.measure.parity import FlopCount, counted
from experiments.measure.flops import ADAM_FLOPS_PER_PARAM, achieved_tflops, flops, source
from experiments.common.protocol import Setup
from models import Conv, Image, ModelSpec
from tests.helpers import ROOT, SEEDS, tiny

BATCH = 4
SEED = 0
CASES = [(name, op) for name in models.available() for op in OPS if op != "training" or tiny(name).trainable]
TRAINABLE = [name for name in SEEDS if tiny(name).trainable]
# XLA compiles a tiny transformer's or U-Net's training step in 3-18 s here: beyond the seeds, XLA's count is
# compared on inference and grad (the training step adds Adam, whose count the seeds check).
XLA_CASES = [(name, op) for name, op in CASES if name in SEEDS or op != "training"]


@cache
def torch_flops(name: str, op: str) -> int:
    """FlopCounterMode around one call of the op as the torch backend runs it (eager, fp32, CPU), after a first:
    the backend's own count (`Step.cost`)."""
    backend = load("torch")
    backend.configure(Setup("fp32", "cpu"))
    step = backend.prepare(tiny(name), op, BATCH, SEED)
    step.fn()
    return step.cost()


@cache
def xla_flops(name: str, op: str) -> int:
    """XLA's count for the program the jax backend jits for the op on the CPU (`Step.cost`: its cost analysis)."""
    backend = load("jax")
    backend.configure(Setup("fp32", "cpu", compile=True, memory_format="nhwc"))  # XLA:CPU's cost model, anywhere
    return backend.prepare(tiny(name), op, BATCH, SEED).cost()


def adam(name: str) -> int:
    return ADAM_FLOPS_PER_PARAM * tiny(name).param_count()


@pytest.mark.parametrize("name,op", CASES)
def test_torch_counter_agrees_exactly(name, op):
    # Both count 2 FLOPs per multiply-add of mm/addmm/convolution(_backward) and nothing elementwise, so they
    # agree exactly (lenet grad at batch 32: 48,545,280 both). torch's counter has no formula for Adam's foreach
    # ops, so its training count is its grad count. Exact, not within 2%: a first layer given an input gradient
    # would add only 0.8% to an MLP's grad. The fused attention and LSTM kernels count by the torch backend's
    # formulas, and a grouped conv's weight gradient with the groups divided out (stock torch 2.13: dscnn's grad
    # at 16 channels would read 7,288,320 FLOPs high).
    expected = flops(tiny(name), op, BATCH) - (adam(name) if op == "training" else 0)
    assert torch_flops(name, op) == expected


def test_the_stock_torch_counter_counts_a_depthwise_weight_gradient_as_dense():
    """Why the torch backend replaces the formula: the stock one ignores the groups (pytorch/pytorch#183405)."""
    from experiments.measure.backends import torch_backend as tb

    grad_out, x, w = [4, 16, 25, 5], [4, 16, 25, 5], [16, 1, 3, 3]
    args = (None, [1, 1], [1, 1], [1, 1], False, [0, 0], 16, [False, True, False])
    dense = tb._stock_conv_backward(grad_out, x, w, *args, out_shape=[None, w])
    assert dense == 16 * tb._grouped_conv_backward(grad_out, x, w, *args, out_shape=[None, w]) == 16 * 2 * 4 * 125 * 9 * 16


# XLA's extra over the layers' count, at tests/helpers' sizes, batch 4 (jax 0.10.2), for inference/grad: gpt_tiny
# +18/10% and vit_tiny +16/10% (exact GELU's erf polynomial and the softmax; the grad reads less than the layers'
# 2.5× for the fused attention's backward, since XLA does not recompute the scores), unet_small +7/13% (GroupNorm,
# SiLU), lstm +7/11% (the gates; its scan counted once), dscnn +18% (BatchNorm and relu on 16 channels).
SLACK = {"gpt_tiny": 1.2, "vit_tiny": 1.2, "unet_small": 1.2, "lstm": 1.2, "dscnn": 1.2}


@pytest.mark.parametrize("name,op", XLA_CASES)
def test_xla_counts_the_same_matmuls_plus_elementwise_ops(name, op):
    # XLA counts only the kernel taps inside the image (padding=False) and adds every elementwise op: bias adds,
    # activations, BatchNorm, pools, the loss, their gradients. Those added, at batch 4 (jax 0.10.2), for
    # inference/grad/training: mlp_relu +0.5/0.4/0.3%, mlp_gelu +2.0/2.1/1.4%, mlp_batchnorm +1.3/5.1/3.4% (at
    # batch 32 its grad is +2.6%: BatchNorm's per-feature work does not grow with the batch), lenet +2.3/4.6/4.2%,
    # resnet +0.4/1.1/1.1%, matmul_chain at n=16 +3.6/1.8% (tiny matmuls; at its default n=1000, +0.05/0.03%).
    # The dense count (padding=True) is 4.4–5.1% above XLA's for resnet, whose 3×3 convs are padded: it would fail
    # the lower bound. So would an input gradient for the first layer (+0.8% on an MLP, whose elementwise share
    # is 0.4%), and a missing weight gradient would break the upper bound (Adam's share has its own test).
    if name == "dscnn" and op != "inference":
        # XLA's cost analysis counts the gradient of a depthwise conv's kernel (a convolution with
        # batch_group_count = its channels) far above its work: 2.9× the layers' count for dscnn's grad at 16
        # channels, 3.1× at 8. torch's count (with the groups divided out) is the one that holds.
        assert xla_flops(name, op) > 2 * flops(tiny(name), op, BATCH)
        return
    inside = flops(tiny(name), op, BATCH, padding=False, loops=False)
    assert inside <= xla_flops(name, op) <= SLACK.get(name, 1.06) * inside


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


def one_conv(conv: Conv) -> ModelSpec:
    return ModelSpec(name="one_conv", layers=(conv,), input=Image(4, 4, 2), target=Image(4, 4, 5), loss="sse",
                     batch_sizes={})


def test_padding_false_counts_taps_inside_the_image():
    # a 3×3 kernel with padding 1 on 4 pixels: 4 outputs × 3 taps, minus the one tap off each edge
    spec = one_conv(Conv(2, 5, 3, pad=1))
    assert flops(spec, "inference", 1) == 2 * (4 * 3) ** 2 * 2 * 5
    assert flops(spec, "inference", 1, padding=False) == 2 * (4 * 3 - 2) ** 2 * 2 * 5
    strided = one_conv(Conv(2, 5, 3, stride=2, pad=1))  # outputs 0 and 1 read -1..1, 1..3
    assert flops(strided, "inference", 1, padding=False) == 2 * (2 * 3 - 1) ** 2 * 2 * 5
    assert flops(tiny("lenet"), "grad", 2, padding=False) == flops(tiny("lenet"), "grad", 2)  # no padding


def test_achieved_tflops():
    assert achieved_tflops(3_000_000_000, 1e-3) == pytest.approx(3.0)


def test_grouped_rectangular_conv_by_hand():
    # 2 groups of 2→3 channels, a 3×2 kernel with stride 2 and padding (1, 0) on 7×6: outputs 4×3
    spec = ModelSpec(name="grouped", layers=(Conv(4, 6, (3, 2), stride=2, pad=(1, 0), groups=2),),
                     input=Image(7, 6, 4), target=Image(4, 3, 6), loss="sse", batch_sizes={})
    assert flops(spec, "inference", 1) == 2 * (4 * 3) * (3 * 2) * 2 * 6


def test_transformer_by_hand():
    # gpt_tiny at batch 1: per block qkv 2·64·128·384, scores and values 2 · 2·64²·128, out 2·64·128², MLP
    # 2 · 2·64·128·512; the head 2·64·128·256
    block = 2 * 64 * 128 * 384 + 2 * 2 * 64**2 * 128 + 2 * 64 * 128**2 + 2 * 2 * 64 * 128 * 512
    spec = models.load("gpt_tiny")
    assert flops(spec, "inference", 1) == 2 * block + 2 * 64 * 128 * 256
    # the LSTM: 4 gates × (64 + 128) × 128 per step, 32 steps, and the classifier 2·128·2
    assert flops(models.load("lstm"), "inference", 1) == 2 * 32 * 4 * 128 * (64 + 128) + 2 * 128 * 2
    assert flops(models.load("lstm"), "inference", 1, loops=False) == 2 * 4 * 128 * (64 + 128) + 2 * 128 * 2


def test_the_source_of_every_dsl_model_is_its_layers():
    assert {source(tiny(n)) for n in models.available()} == {"dsl"}
    assert counted(tiny("lenet"), "grad", 2) == FlopCount("grad", 2, flops(tiny("lenet"), "grad", 2), "dsl")


def test_torch_counts_its_encoder_layers_inference_by_hand():
    """nn.TransformerEncoderLayer's inference fast path has no formula: the counter sees the same math unfused
    (docs/examples/encoder.py at batch 8, one layer: 128 tokens of 32 features, 4 heads)."""
    encoder = models.load("file", path=str(ROOT / "docs" / "examples" / "encoder.py"), depth=1)
    tokens, d = 8 * 16, 32
    layer = 2 * tokens * d * 3 * d + 2 * 2 * 8 * 16 * 16 * d + 2 * tokens * d * d + 2 * 2 * tokens * d * 4 * d
    assert counted(encoder, "inference", 8) == FlopCount("inference", 8, layer + 2 * 8 * d * 10, "torch")

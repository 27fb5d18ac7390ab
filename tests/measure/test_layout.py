"""Memory layout is declared, never an accident: torch inputs, weights and conv outputs have the declared strides."""
import pytest
import torch

import models
from experiments.measure.backends import load
from experiments.common.protocol import Setup
from tests.helpers import tiny

CONV_MODELS = [m for m in models.available()
               if any(isinstance(layer, models.Conv) for layer in models.load(m).layers)]


def strides(n: int, c: int, h: int, w: int, memory_format: str) -> tuple[int, ...]:
    """The strides torch gives an (n, c, h, w) tensor in that format, written out so a size-1 C can't hide it."""
    return (c * h * w, h * w, w, 1) if memory_format == "contiguous" else (h * w * c, 1, w * c, c)


def test_both_channel_counts_are_covered():
    assert {models.load(m).input_shape[-1] for m in CONV_MODELS} == {1, 3}  # lenet and resnet


@pytest.mark.parametrize("memory_format", ["contiguous", "channels_last"])
@pytest.mark.parametrize("name", CONV_MODELS)
@pytest.mark.parametrize("op", ["inference", "training"])
def test_input_weights_and_first_conv_output_have_the_declared_strides(name, op, memory_format):
    backend = load("torch")
    backend.configure(Setup("fp32", "cpu", memory_format=memory_format))
    seen = []

    def hook(module, inputs, output):
        if isinstance(module, torch.nn.Conv2d) and not seen:
            seen.append((inputs[0], module.weight, output))

    step = backend.prepare(tiny(name), op, 4, 0)
    handle = torch.nn.modules.module.register_module_forward_hook(hook)
    try:
        step.sync(step.fn())
    finally:
        handle.remove()
    (x, weight, out) = seen[0]
    assert x.stride() == strides(*x.shape, memory_format)
    assert weight.stride() == strides(*weight.shape, memory_format)
    assert out.stride() == strides(*out.shape, memory_format)


def test_an_unknown_layout_is_refused():
    from experiments.measure.backends import Unavailable

    with pytest.raises(Unavailable, match="contiguous or channels_last"):
        load("torch").configure(Setup("fp32", "cpu", memory_format="nhwc"))
    with pytest.raises(Unavailable, match="nhwc"):
        load("jax").configure(Setup("fp32", "cpu", memory_format="channels_last"))

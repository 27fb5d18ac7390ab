"""Every layer `models/` can declare has a builder on each side and a FLOP count: a new layer missed in one of the
three tables is caught here, before a model that uses it fails inside a worker."""
import typing

import pytest

import models._layers as layers
from experiments.measure import flops
from experiments.measure.backends import jax_layers, torch_layers

DECLARED = set(typing.get_args(layers.Layer))


def test_the_layer_union_is_made_of_frozen_layer_classes():
    assert DECLARED and all(c.__module__ == layers.__name__ and c.__dataclass_params__.frozen for c in DECLARED)


@pytest.mark.parametrize("side", [jax_layers, torch_layers], ids=["jax", "torch"])
def test_each_side_builds_every_layer(side):
    assert set(side.BUILDERS) == DECLARED


def test_every_layer_has_a_flop_count():
    """A container (a residual block, a concatenation) is counted as the layers inside it."""
    assert set(flops.COUNTS) == DECLARED - {layers.Residual, layers.Concat}

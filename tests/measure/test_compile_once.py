"""A compiled step compiles once: the first call holds all of the compile, and no later call recompiles.

JAX once compiled its training step twice (Adam's step counter was not on the device like the params: first calls
of 417, 320, then 2.7 ms); torch.compile recompiles on a new shape or a guard failure. The count is also logged as
`<op>_compiles` on every compiled run.
"""
import pytest

import models
from experiments.measure.backends import Unsupported, load
from experiments.common.config import OPS
from experiments.common.protocol import Setup
from tests.helpers import FORMAT, tiny

CASES = [(fw, name, op) for fw in ("jax", "torch") for name in models.available() for op in OPS]


@pytest.mark.parametrize("fw,name,op", CASES)
def test_compiles_exactly_once(fw, name, op):
    backend = load(fw)
    backend.configure(Setup("fp32", "cpu", compile=True, memory_format=FORMAT[fw]))
    try:
        step = backend.prepare(tiny(name), op, 4, 0)
    except Unsupported:
        assert op == "training" and not tiny(name).trainable
        return
    for _ in range(6):  # the first call, then the calls that recompiled when state moved or changed
        step.sync(step.fn())
    assert step.compiles() == 1

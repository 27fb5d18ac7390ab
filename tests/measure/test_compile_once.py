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
from tests.helpers import FORMAT, SEEDS, TORCH_COMPILED, tiny

# The seed's models; beyond them jax's compiles are counted in tests/measure/test_backends.py, as are torch's for the
# models it compiles (TORCH_COMPILED: torch.compile takes 5-20 s a graph here, so none is compiled twice), and lstm's
# torch graph break below.
CASES = [(fw, name, op) for fw in ("jax", "torch") for name in SEEDS for op in OPS
         if not (fw == "torch" and name in TORCH_COMPILED)]


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


@pytest.mark.slow  # lstm is no model of the fast tier (tests/conftest.py FAST_MODELS), and its compile takes 5-12 s
def test_torch_compile_breaks_at_nn_lstm():
    """Dynamo does not trace nn.LSTM (torch._dynamo.config.allow_rnn is off) and falls back to eager for the model
    that holds it: the step compiles to two small graphs (the indexing of the LSTM's output, and the loss), which
    `<op>_compiles` shows as 2 where any other model reads 1; nothing recompiles."""
    backend = load("torch")
    backend.configure(Setup("fp32", "cpu", compile=True, memory_format=FORMAT["torch"]))
    step = backend.prepare(tiny("lstm"), "training", 4, 0)
    for _ in range(4):
        step.sync(step.fn())
    assert step.compiles() == 2

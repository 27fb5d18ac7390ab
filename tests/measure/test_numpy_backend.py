"""The numpy reference backend, added through the seam alone: the layer DSL's inference in numpy, the same function
as the jax adapter's; what it lacks is a skipped op or a one-line refusal, with the reason."""
import numpy as np
import pytest

import models
from experiments.common.frameworks import traits
from experiments.common.protocol import Setup
from experiments.measure.backends import Unavailable, Unsupported, load, module
from tests.helpers import tiny

NUMPY = Setup("fp32", "cpu", memory_format="nhwc")


@pytest.mark.parametrize("name", ["mlp_relu", "mlp_gelu", "lenet"])
def test_inference_is_the_same_function_as_the_jax_adapters(name):
    spec, backend = tiny(name), load("numpy")
    assert backend.configure(NUMPY) == "cpu"
    step = backend.prepare(spec, "inference", 8, 0)
    out = step.fn()
    step.sync(out)
    assert step.device_of(out) == "cpu" and out.dtype == np.float32
    x = spec.make_batch(8, 0)[0]
    np.testing.assert_allclose(out, module("jax").forward(spec, spec.init(0), x), rtol=1e-4, atol=1e-6)
    np.testing.assert_array_equal(step.fn(), out)


def test_what_it_lacks_is_unsupported_with_the_reason():
    backend = load("numpy")
    backend.configure(NUMPY)
    for op in ("training", "grad"):
        with pytest.raises(Unsupported, match="inference only"):
            backend.prepare(tiny("mlp_relu"), op, 8, 0)
    with pytest.raises(Unsupported, match="no layer BatchNorm"):
        backend.prepare(tiny("mlp_batchnorm"), "inference", 8, 0)
    net = models.Network(name="net", input=models.Array((4,)), target=models.Array((2,)), loss="sse",
                         batch_sizes={"inference": (2,)}, torch=lambda: None)
    with pytest.raises(Unsupported, match="net is a network the numpy backend can't build: only torch measures it"):
        backend.prepare(net, "inference", 2, 0)


@pytest.mark.parametrize("setup,fix", [
    (Setup("fp32", "cpu", compile=True, memory_format="nhwc"), "framework.compile=false"),
    (Setup("bf16", "cpu", memory_format="nhwc"), "precision=fp32 or fp64"),
    (Setup("fp32", "cpu", memory_format="nhwc", threads=1), "framework.threads=null"),
    (Setup("fp32", "gpu", memory_format="nhwc"), "device=cpu"),
])
def test_a_setup_it_cannot_run_is_refused_naming_the_fix(setup, fix):
    with pytest.raises(Unavailable, match=fix):
        load("numpy").configure(setup)


def test_its_descriptor_and_matmul():
    assert traits("numpy").mode(False) == "numpy-eager" and traits("numpy").packages == ("numpy",)
    backend = load("numpy")
    backend.configure(Setup("fp64", "cpu", memory_format="nhwc"))
    out = backend.matmul(16).fn()
    assert out.dtype == np.float64 and np.allclose(out, 1 / 16)
    assert backend.environment()["numpy_version"] == np.__version__ and backend.peak_memory() is None

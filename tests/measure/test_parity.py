"""jax and torch compute the same functions from the same numpy weights (fp32, CPU, tiny batches)."""
from __future__ import annotations

import numpy as np
import pytest

import models
from experiments.measure.backends import module
from tests.helpers import tiny

jax_backend, torch_backend = module("jax"), module("torch")
# Batch 8, not 3: through BatchNorm at batch 3 float32 itself is the limit (jax vs torch grads differ by 2e-4,
# each vs float64 alike); at batch 8 they agree to 2e-6.
BATCH = 8


def varied(spec: models.ModelSpec, seed: int = 1) -> dict[str, np.ndarray]:
    """The spec's weights with BatchNorm affine and running stats (and matmul weights) made non-trivial,
    so eval-mode BatchNorm and the layout conversions are really exercised."""
    rng = np.random.default_rng(seed)
    params = spec.init(0)
    for key, v in params.items():
        last = key.rsplit(".", 1)[-1]
        if last in ("scale", "var"):
            params[key] = rng.uniform(0.5, 1.5, v.shape)
        elif last == "mean" or (last == "bias" and key[:-4] + "scale" in params):
            params[key] = rng.normal(0, 0.2, v.shape)
        elif last in ("w1", "b1", "w2", "b2"):
            params[key] = rng.uniform(-1, 1, v.shape) / np.sqrt(v.shape[-1])
    return {k: v.astype(np.float32) for k, v in params.items()}


@pytest.mark.parametrize("name", models.available())
def test_forward_parity(name):
    spec = tiny(name)
    params, (x, _) = varied(spec), spec.make_batch(BATCH, 0)
    a, b = jax_backend.forward(spec, params, x), torch_backend.forward(spec, params, x)
    assert a.shape == b.shape == ((BATCH, spec.out_dim) if spec.trainable else ())
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6 * np.abs(a).max())


@pytest.mark.parametrize("name", models.available())
def test_grad_parity(name):
    spec = tiny(name)
    params, (x, y) = varied(spec), spec.make_batch(BATCH, 0)
    la, ga = jax_backend.loss_and_grads(spec, params, x, y)
    lb, gb = torch_backend.loss_and_grads(spec, params, x, y)
    np.testing.assert_allclose(la, lb, rtol=1e-4)
    if not spec.trainable:  # the gradient w.r.t. x
        np.testing.assert_allclose(ga, gb, rtol=1e-4, atol=1e-6 * np.abs(ga).max())
        return
    assert ga.keys() == gb.keys() == {k for k in params if not models.is_stat(k)}
    # A Dense bias just before a BatchNorm has an exactly zero gradient: rounding noise, compared against
    # the scale of all gradients.
    atol = 1e-6 * max(np.abs(g).max() for g in ga.values())
    for key in ga:
        assert ga[key].shape == params[key].shape, key
        np.testing.assert_allclose(ga[key], gb[key], rtol=1e-4, atol=atol, err_msg=key)


def seed004(x: np.ndarray, w1, b1, w2, b2, depth: int) -> float:
    o = x.astype(np.float64)
    for _ in range(depth):
        o = (o @ w1 - b1) @ w2 - b2
    return o.mean()


@pytest.mark.parametrize("backend", [jax_backend, torch_backend], ids=["jax", "torch"])
def test_matmul_chain_matches_seed004(backend):
    n, m, depth = 16, 4, 3
    spec = tiny("matmul_chain")
    x, y = spec.make_batch(m, 0)
    assert (x == 1).all() and x.shape == (m, n)
    # With the seed's constants w = ones/n (idempotent) every step subtracts 2/n: mean = 1 - 2·depth/n,
    # and d mean / dx = 1/(m·n) everywhere.
    params = spec.init(0)
    w = [params[f"0.{k}"].astype(np.float64) for k in ("w1", "b1", "w2", "b2")]
    assert seed004(x, *w, depth) == pytest.approx(1 - 2 * depth / n)
    loss, dx = backend.loss_and_grads(spec, params, x, y)
    assert loss == pytest.approx(1 - 2 * depth / n, rel=1e-6)
    np.testing.assert_allclose(dx, np.full((m, n), 1 / (m * n)), rtol=1e-5)
    # Random weights: the same formula in float64; the chain is affine, so dx = 1/(m·n) · ones @ (w1 w2)^depth ᵀ.
    params = varied(spec)
    w = [params[f"0.{k}"].astype(np.float64) for k in ("w1", "b1", "w2", "b2")]
    xr = np.random.default_rng(2).standard_normal((m, n)).astype(np.float32)
    loss, dx = backend.loss_and_grads(spec, params, xr, y)
    assert backend.forward(spec, params, xr) == pytest.approx(seed004(xr, *w, depth), rel=1e-5, abs=1e-7)
    assert loss == pytest.approx(seed004(xr, *w, depth), rel=1e-5, abs=1e-7)
    a = np.linalg.matrix_power(w[0] @ w[2], depth)
    np.testing.assert_allclose(dx, np.full((m, n), 1 / (m * n)) @ a.T, rtol=1e-4, atol=1e-7)


@pytest.mark.parametrize("name,count", [
    ("mlp_relu", 339_978),  # seed 000 prints these three
    ("mlp_gelu", 339_978),
    ("mlp_batchnorm", 343_050),  # running stats (3_072) not counted
    # conv 5·5·1·6+6 = 156, conv 5·5·6·16+16 = 2_416, dense 256·120+120 = 30_840, 120·84+84 = 10_164, 84·10+10 = 850
    ("lenet", 44_426),
    # conv 3·3·3·64 = 1_728, BN 128; block: 2 × (3·3·64·64 = 36_864 + BN 128); conv 3·3·64·128 = 73_728, BN 256;
    # conv 3·3·128·128 = 147_456, BN 256; dense 128·10+10 = 1_290
    ("resnet", 298_826),
    ("matmul_chain", 2_002_000),  # constants w1, w2 (1000²) and b1, b2 (1000) at the default n=1000
])
def test_param_count(name, count):
    spec = models.load(name)
    assert spec.param_count() == count
    if name != "matmul_chain":
        assert sum(v.size for k, v in spec.init(0).items() if not models.is_stat(k)) == count


def test_load_errors_name_the_choices():
    with pytest.raises(ValueError, match="lenet.*matmul_chain.*mlp_relu"):
        models.load("mlp")
    with pytest.raises(ValueError, match="n, m, depth"):
        models.load("matmul_chain", width=3)


def test_spec_contract():
    for name in models.available():
        spec = tiny(name)
        assert spec.batch_sizes["grad"] == spec.batch_sizes["training" if spec.trainable else "inference"]
        a, b = spec.init(3), spec.init(3)
        assert all(v.dtype == np.float32 and np.array_equal(v, b[k]) for k, v in a.items())
        x, y = spec.make_batch(2, 0)
        assert x.shape == (2, *spec.input_shape) and x.dtype == y.dtype == np.float32
        assert y.shape == (2, spec.out_dim)

"""jax and torch compute the same functions from the same numpy weights (fp32, CPU, tiny batches)."""
from __future__ import annotations

import numpy as np
import pytest

import models
from experiments.measure import parity
from experiments.measure.backends import module
from models import (LSTM, Act, Array, Attention, ClassToken, Concat, Conv, Dense, Embed, GlobalMeanPool, GroupNorm,
                    Image, Labels, LayerNorm, MaxPool, ModelSpec, NextToken, PosEmbed, RMSNorm, Token, Tokens,
                    ToTokens, Upsample)
from tests.helpers import TINY, tiny

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
        elif last in ("mean", "token") or (last == "bias" and key[:-4] + "scale" in params):
            params[key] = rng.normal(0, 0.2, v.shape)
        elif last in ("w1", "b1", "w2", "b2"):
            params[key] = rng.uniform(-1, 1, v.shape) / np.sqrt(v.shape[-1])
    return {k: v.astype(np.float32) for k, v in params.items()}


def layer(name: str, layers: tuple, input, target, loss: str = "sse") -> ModelSpec:
    return ModelSpec(name=name, layers=layers, input=input, target=target, loss=loss, batch_sizes={"inference": (2,)})


# One small model per layer beyond the seed's, each ending where its output is easy to judge.
LAYERS = {m.name: m for m in [
    layer("embed_posembed", (Embed(11, 6), PosEmbed(5, 6), Dense(6, 11)), Tokens(5, 11), NextToken(), "cross_entropy"),
    layer("layernorm", (LayerNorm(6), Dense(6, 3)), Array((4, 6)), Array((4, 3))),
    layer("rmsnorm", (RMSNorm(6), Dense(6, 3)), Array((4, 6)), Array((4, 3))),
    layer("groupnorm_silu", (Conv(3, 8, 3, pad=1), GroupNorm(4, 8), Act("silu")), Image(6, 6, 3), Image(6, 6, 8)),
    layer("gelu_exact", (Dense(6, 8), Act("gelu"), Dense(8, 3)), Array((6,)), Array((3,))),
    layer("attention", (Attention(8, 2), Dense(8, 3)), Array((5, 8)), Labels(3, (5,)), "cross_entropy"),
    layer("attention_causal", (Attention(8, 2, causal=True),), Array((5, 8)), Array((5, 8))),
    layer("grouped_conv", (Conv(4, 6, (3, 2), stride=2, pad=(1, 0), groups=2),), Image(7, 6, 4), Image(4, 3, 6)),
    layer("depthwise_conv", (Conv(4, 4, 3, pad=1, groups=4), GlobalMeanPool(), Dense(4, 3)), Image(5, 5, 4),
          Labels(3), "cross_entropy"),
    layer("upsample_concat", (Conv(2, 4, 3, pad=1), Concat((MaxPool(2), Conv(4, 4, 1), Upsample(2))), Conv(8, 2, 1)),
          Image(6, 6, 2), Image(6, 6, 2)),
    layer("patches_class_token", (Conv(3, 6, 2, stride=2), ToTokens(), ClassToken(6), PosEmbed(10, 6), Token(0),
                                  Dense(6, 4)), Image(6, 6, 3), Labels(4), "cross_entropy"),
    layer("lstm", (LSTM(4, 5), Token(-1), Dense(5, 3)), Array((6, 4)), Labels(3), "cross_entropy"),
]}
CASES = [pytest.param(n, id=n) for n in models.available()] + [pytest.param(n, id=f"layer-{n}") for n in LAYERS]


def spec_of(name: str) -> ModelSpec:
    return LAYERS[name] if name in LAYERS else tiny(name)


@pytest.mark.parametrize("name", CASES)
def test_forward_parity(name):
    spec = spec_of(name)
    params, (x, _) = varied(spec), spec.make_batch(BATCH, 0)
    a, b = jax_backend.forward(spec, params, x), torch_backend.forward(spec, params, x)
    assert a.shape == b.shape == ((BATCH, *spec.output_shape) if spec.trainable else ())
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6 * np.abs(a).max())


@pytest.mark.parametrize("name", CASES)
def test_grad_parity(name):
    spec = spec_of(name)
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
    # embed 256·128 = 32_768, positions 64·128 = 8_192; 2 blocks of LN 256, qkv 128·384+384 = 49_536, out
    # 128·128+128 = 16_512, LN 256, MLP 128·512+512 = 66_048 and 512·128+128 = 65_664; LN 256, head 128·256+256
    ("gpt_tiny", 470_784),
    # patches 4·4·3·192+192 = 9_408, class token 192, positions 65·192 = 12_480; 2 blocks of 444_864 at width 192;
    # LN 384, head 192·10+10 = 1_930
    ("vit_tiny", 914_122),
    # levels (conv 3×3 + bias, GN, conv 3×3 + bias, GN) 3→16: 2_832, 16→32: 14_016, 32→64: 55_680, 96→32:
    # 37_056, 48→16: 9_312; the 1×1 conv 16→3: 51
    ("unet_small", 118_947),
    # embed 1000·64 = 64_000; LSTM 4·128·(64+128) kernels and 4·128 biases (one per gate: flax's) = 98_816;
    # dense 128·2+2 = 258
    ("lstm", 163_074),
    # conv 10·4·64+64 = 2_624, BN 128; 4 × (depthwise 9·64+64 = 640, BN 128, pointwise 64·64+64 = 4_160, BN 128);
    # dense 64·12+12 = 780
    ("dscnn", 23_756),
])
def test_param_count(name, count):
    spec = models.load(name)
    assert spec.param_count() == count
    if name != "matmul_chain":
        assert sum(v.size for k, v in spec.init(0).items() if not models.is_stat(k)) == count


def test_a_sweep_compares_the_frameworks_at_a_batch_where_batchnorm_gradients_mean_something():
    """The seed's mlp_batchnorm (its real sizes): at batch 2 its gradients through training-mode BatchNorm are
    float32 noise and the two frameworks 'differ' by 0.81; a sweep of batch sizes 2 and 32 compares them at 8,
    where they agree, and says so."""
    assert [parity.check_batch(b) for b in ([2, 8, 32], [32, 128], [4096], [])] == [8, 32, 64, 8]
    spec = models.load("mlp_batchnorm")
    assert parity.check(spec, 0, 2).status == "failed"
    checked = parity.prove(spec, [("training", 2), ("training", 32)]).parity
    assert checked.status == "ok" and checked.batch == 8 and checked.worst < parity.TOLERANCE


def test_load_errors_name_the_choices():
    with pytest.raises(ValueError, match="lenet.*matmul_chain.*mlp_relu"):
        models.load("mlp")
    with pytest.raises(ValueError, match="n, m, depth"):
        models.load("matmul_chain", width=3)
    with pytest.raises(ValueError, match="model.heads=5 must divide model.width=128: e.g. model.heads=4"):
        models.load("gpt_tiny", heads=5)


def test_spec_contract():
    for name in models.available():
        spec = tiny(name)
        assert spec.batch_sizes["grad"] == spec.batch_sizes["training" if spec.trainable else "inference"]
        a, b = spec.init(3), spec.init(3)
        assert all(v.dtype == np.float32 and np.array_equal(v, b[k]) for k, v in a.items())
        x, y = spec.make_batch(2, 0)
        assert x.shape == (2, *spec.input_shape)
        assert x.dtype == (np.int32 if isinstance(spec.input, Tokens) else np.float32)
        if isinstance(spec.target, (Labels, NextToken)):  # integer classes, within range
            classes = spec.output_shape[-1]
            assert y.dtype == np.int32 and y.shape == (2, *spec.output_shape[:-1]) and 0 <= y.min() <= y.max() < classes
        else:
            assert y.dtype == np.float32 and y.shape == ((2, *spec.output_shape) if spec.target else (2, 0))


def test_next_token_targets_are_the_input_shifted():
    spec = tiny("gpt_tiny")
    x, y = spec.make_batch(3, 0)
    np.testing.assert_array_equal(x[:, 1:], y[:, :-1])
    assert x.flags.c_contiguous and y.flags.c_contiguous


def test_the_encoder_is_the_same_network_without_the_mask():
    causal, encoder = tiny("gpt_tiny"), models.load("gpt_tiny", **TINY["gpt_tiny"], causal=False)
    assert causal.param_count() == encoder.param_count()
    params, (x, _) = causal.init(0), causal.make_batch(2, 0)
    a, b = jax_backend.forward(causal, params, x), jax_backend.forward(encoder, params, x)
    np.testing.assert_allclose(a[:, -1], b[:, -1], rtol=1e-5, atol=1e-6)  # the last token sees everything either way
    assert not np.allclose(a[:, 0], b[:, 0], atol=1e-3)  # the first one sees only itself when causal


def test_torch_lstm_has_flax_cell_parameters():
    """torch's b_hh is held at zero and frozen: the trainable parameters are the canonical ones, the same count."""
    spec = LAYERS["lstm"]
    model = torch_backend.make_model(spec, spec.init(0), "fp32", train=True)
    lstm = model[0].lstm
    assert not lstm.bias_hh_l0.requires_grad and not lstm.bias_hh_l0.any()
    assert sum(p.numel() for p in model.parameters() if p.requires_grad) == spec.param_count()


def test_a_zero_gradient_is_compared_against_the_largest_one():
    """A conv bias before a BatchNorm has a zero gradient, rounding noise on each side (dscnn's: ~1e-9): compared
    against itself it reads 2× apart, against a floor of the largest gradient (here 1e-2) it reads as equal; a real
    error above the floor still fails."""
    noise_jax, noise_torch = np.array([1e-9, -2e-9]), np.array([-1e-9, 1e-9])
    assert parity.relative(noise_jax, noise_torch) > 1
    assert parity.relative(noise_jax, noise_torch, floor=parity.GRAD_FLOOR * 1e-2) < parity.TOLERANCE
    assert parity.relative(np.array([2e-5]), np.array([0.0]), floor=parity.GRAD_FLOOR * 1e-2) > parity.TOLERANCE

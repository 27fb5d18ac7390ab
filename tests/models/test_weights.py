"""A weight map's readings (a name, (name, axes), `models.From` with rows, reshape or a function), the layers' maps
(attention, an encoder layer, an LSTM's gates), the door's one-line refusals and the fix each names, and the parity
of each framework's own attention layer, the documented example swept from the user's directory."""
from __future__ import annotations

import re

import numpy as np
import pytest

import models
from experiments.measure import parity
from models._weights import entry, fix
from tests.helpers import BRIEF, ROOT, run, runs, with_store

NETS = ROOT / "tests" / "fixtures" / "nets"  # attention.py, lstm.py: each framework's own layer, and bad maps
EXAMPLE = ROOT / "docs" / "examples" / "encoder.py"  # the encoder docs/own-network.md links and shows in part


def net(file: str, **keys) -> models.Network:
    return models.load("file", path=str(NETS / file), **keys)


def test_no_helper_is_shadowed_by_a_built_in_model():
    """Importing a built-in model's module sets it as an attribute of `models`: a helper of the same name would turn
    into that module once any sweep has loaded the model."""
    assert not set(models.__all__) & set(models.available())
    models.load("lstm")
    assert callable(models.lstm_cell) and callable(models.attention)


def test_a_reading_slices_transposes_reshapes_or_calls():
    w, b = np.arange(96 * 32.0).reshape(96, 32), np.arange(96.0)
    key = models.From("qkv.weight", rows=slice(32, 64), reshape=(32, 4, 8))
    assert np.array_equal(key.read("att.key.kernel", w), w[32:64].T.reshape(32, 4, 8))  # the kernel rule, then reshape
    assert key.shape("att.key.kernel", w.shape) == (32, 4, 8) and key.label() == "qkv.weight[32:64]"
    bias = models.From("qkv.bias", rows=slice(64, 96), reshape=(4, 8))
    assert np.array_equal(bias.read("att.value.bias", b), b[64:].reshape(4, 8))
    every_other = models.From("w", rows=slice(1, None, 2), axes=(0, 1))
    assert np.array_equal(every_other.read("x.kernel", w), w[1::2])
    assert every_other.shape("x.kernel", w.shape) == (48, 32)
    fn = models.From("w", fn=lambda a: a[:32].T.reshape(32, 4, 8))
    assert np.array_equal(fn.read("q.kernel", w), w[:32].T.reshape(32, 4, 8))
    assert fn.shape("q.kernel", (96, 32)) == (32, 4, 8)  # from a stand-in that holds no values
    # the forms a map had before From: a name (the kernel rule), (name, axes)
    assert np.array_equal(entry("fc.kernel", "fc.weight").read("fc.kernel", w), w.T)
    assert np.array_equal(entry("fc.bias", "fc.bias").read("fc.bias", b), b)
    assert np.array_equal(entry("p.kernel", ("p.weight", (0, 1))).read("p.kernel", w), w)
    assert repr(key) == "models.From('qkv.weight', rows=slice(32, 64), reshape=(32, 4, 8))"


@pytest.mark.parametrize("make,message", [
    (lambda: models.From("w", rows=(0, 32)), r"^models.From's rows must be a slice of integers, e.g. rows=slice"),
    (lambda: models.From("w", rows=slice(0, 32, -1)), r"^models.From's rows must be a slice of integers"),
    (lambda: models.From("w", reshape=(4, "8")), r"^models.From's reshape must be a tuple of integers"),
    (lambda: models.From("w", rows=slice(0, 8), fn=np.transpose), r"takes a function and nothing else: give fn, or"),
    (lambda: entry("x.kernel", 3), r"^the weight map's x.kernel is 3: give a torch name, \(name, axes\) or models"),
    (lambda: models.attention("att", "att", dim=30, heads=4), r"dim=30 is not a multiple of heads=4"),
])
def test_a_malformed_reading_is_one_line(make, message):
    with pytest.raises(ValueError, match=message) as e:
        make()
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("flax_name,flax_shape,name,shape,named", [
    ("w", (32, 16), "t.w", (16, 32), "give the axes, e.g. 'w': ('t.w', (1, 0))"),
    ("conv.kernel", (3, 3, 4, 8), "conv.weight", (8, 4, 3, 3), "give its name alone"),
    ("att.out.kernel", (4, 8, 32), "att.out_proj.weight", (32, 32),
     "reshape it, e.g. 'att.out.kernel': models.From('att.out_proj.weight', reshape=(4, 8, 32))"),
    ("q.kernel", (32, 32), "qkv.weight", (96, 32),
     "qkv.weight packs 3 parts along its rows: read one, e.g. 'q.kernel': "
     "models.From('qkv.weight', rows=slice(0, 32))"),
    ("q.kernel", (32, 4, 8), "qkv.weight", (96, 32), "reshape=(32, 4, 8)"),
    ("att.query.bias", (4, 8), "att.in_proj_bias", (96,), "**models.attention('att', 'att', dim=32, heads=4)"),
    ("cell.hg.kernel", (5, 5), "lstm.weight_hh_l1", (20, 5), "**models.lstm_cell('cell', 'lstm', hidden=5, layer=1)"),
    ("b", (5,), "t.b", (7,), "no reading of t.b's 7 values gives 5: map b from the torch parameter that holds it"),
])
def test_the_fix_a_mismatch_names_fits(flax_name, flax_shape, name, shape, named):
    """Only a reading that gives the Flax shape is named: each suggested entry, evaluated, fits."""
    said = fix(flax_name, flax_shape, name, shape)
    assert named in said
    if m := re.search(r"e\.g\. '[^']+': (.+)$", said):
        assert entry(flax_name, eval(m.group(1), {"models": models})).shape(flax_name, shape) == flax_shape
    elif m := re.search(r"\*\*(models\.\w+\(.*\))$", said):
        layer = eval(m.group(1), {"models": models})
        assert layer[flax_name].shape(flax_name, shape) == flax_shape


@pytest.mark.parametrize("file,keys,message", [
    # no transpose unpacks torch's q, k, v: the layer's map is named instead
    ("attention.py", {"weights": "transpose"}, r"^attention: the weight map's att.query.kernel \(32, 4, 8\) <- "
     r"att.in_proj_weight \(96, 32\) reads as \(32, 96\): att.in_proj_weight is torch's packed q, k and v: map the "
     r"layer with \*\*models.attention\('att', 'att', dim=32, heads=4\)$"),
    ("attention.py", {"weights": "badslice"}, r"<- models.From\('att.in_proj_weight', rows=slice\(0, 48\), "
     r"reshape=\(32, 4, 8\)\): rows 0:48 give \(32, 48\) before the reshape, 1536 values, not the 1024 of "
     r"\(32, 4, 8\): .* \*\*models.attention\('att', 'att', dim=32, heads=4\)$"),
    ("attention.py", {"weights": "pastrows"}, r"att.value.bias \(4, 8\) <- .*: rows 64:128 run past its 96 rows: "),
    ("attention.py", {"weights": "badfn"}, r"<- models.From\('att.in_proj_weight', fn=...\) \(96, 32\) reads as "
     r"\(32, 32\): "),
    ("attention.py", {"weights": "unread"}, r"^attention: no entry of the weight map reads rows 64:96 of "
     r"att.in_proj_weight: map them"),
    ("lstm.py", {"weights": "whole"}, r"rnn.cell.hg.bias \(5,\) <- lstm.bias_hh_l0 \(20,\) reads as \(20,\): .* map "
     r"the cell with \*\*models.lstm_cell\('rnn.cell', 'lstm', hidden=5, layer=0\)$"),
    ("lstm.py", {"frozen": False}, r"leaves out torch parameters lstm.bias_ih_l0: map each one; lstm.bias_ih_l0 has "
     r"no counterpart in Flax's LSTM cell \(one bias per gate\): hold it at zero and frozen"),
])
def test_the_door_refuses_a_reading_that_cannot_fit_in_one_line(file, keys, message):
    with pytest.raises(ValueError, match=message) as e:
        net(file, **keys)
    assert "\n" not in str(e.value) and "give the axes" not in str(e.value)


def test_each_framework_s_own_layer_at_parity_and_a_wrong_map_caught():
    """nn.MultiheadAttention against nnx.MultiHeadAttention through the layer's map; k and v swapped fail."""
    ok = parity.check(net("attention.py", weights="helper"))
    assert ok.status == "ok" and ok.worst < 1e-5, ok
    wrong = parity.check(net("attention.py", weights="swapped"))
    assert wrong.status == "failed" and wrong.worst > 1e-2, wrong
    assert wrong.where == "att.value.kernel <- att.in_proj_weight[32:64]", wrong


@pytest.mark.slow
def test_maps_written_by_hand_and_lstm_at_parity_and_a_wrong_gate_order_caught():
    """The attention's rows written by hand or as functions of the torch array, and nn.LSTM against nnx.LSTMCell
    through its map; LSTM's gates g and o swapped fail."""
    for file, weights in (("attention.py", "byhand"), ("attention.py", "fn"), ("lstm.py", "helper")):
        ok = parity.check(net(file, weights=weights))
        assert ok.status == "ok" and ok.worst < 1e-5, (file, weights, ok)
    assert ok.params == {"jax": 4 * (4 * 5 + 5 * 5 + 5) + 5 * 3 + 3, "torch": 218}  # bias_ih frozen: not counted
    wrong = parity.check(net("lstm.py", weights="order"))
    assert wrong.status == "failed" and wrong.worst > 1e-2, wrong
    assert wrong.where == "rnn.cell.ig.kernel <- lstm.weight_ih_l0[15:20]", wrong


@pytest.mark.slow
def test_the_documented_encoder_is_at_parity():
    """docs/own-network.md links the file and shows parts of it as they are; torch's TransformerEncoderLayer against
    the Flax block."""
    doc = (ROOT / "docs" / "own-network.md").read_text().split("](examples/encoder.py)", 1)
    assert len(doc) == 2, "docs/own-network.md links examples/encoder.py"
    shown = re.search(r"```python\n(.*?)```", doc[1], re.S).group(1)
    assert all(part in EXAMPLE.read_text() for part in shown.split("\n\n\n")), shown
    encoder = models.load("file", path=str(EXAMPLE), depth=1)
    got = parity.check(encoder)
    print(f"encoder parity: {got.status}, worst {got.worst:.3g} ({got.where})")
    assert got.status == "ok" and got.worst < 1e-5, got
    assert got.params["jax"] == got.params["torch"] == 64 * 32 + 32 * 10 + 10 + (4 * 32 * 32 + 4 * 32) \
        + (2 * 32 * 128 + 128 + 32) + 4 * 32


@pytest.mark.slow
def test_a_sweep_of_the_documented_encoder_from_the_users_directory(tmp_path):
    """`model=file model.path=./encoder.py +model.depth=1` from the user's directory: both frameworks measured, both
    ops, the key passed on to build(), and the parity process's tags on every point (both ops' parity at full depth:
    test_the_documented_encoder_is_at_parity)."""
    (tmp_path / "encoder.py").write_text(EXAMPLE.read_text())
    r = run(["-m", "framework=jax,torch", "model=file", "model.path=./encoder.py", "+model.depth=1", "batch_size=8",
             "parity=true", *BRIEF], cwd=with_store(tmp_path))
    assert r.returncode == 0, r.stderr[-3000:]
    df = runs(f"sqlite:///{tmp_path}/mlruns/mlflow.db")
    assert len(df) == 2 and set(df["status"]) == {"FINISHED"} and set(df["params.framework"]) == {"jax", "torch"}
    one_layer = 64 * 32 + 32 * 10 + 10 + (4 * 32 * 32 + 4 * 32) + (2 * 32 * 128 + 128 + 32) + 4 * 32
    assert set(df["params.param_count"]) == {str(one_layer)}  # the key reached build()
    assert df["metrics.inference_median_s"].notna().all() and df["metrics.training_median_s"].notna().all()
    assert set(df["tags.parity"]) == {"ok"}, df.filter(like="tags")
    worst = {float(w.split()[0]) for w in df["tags.parity_worst"]}
    print(f"swept encoder parity: ok, worst {df['tags.parity_worst'].iloc[0]}")
    assert len(worst) == 1 and worst.pop() < 1e-5

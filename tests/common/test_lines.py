"""Seed 000's line protocol: parse and format as the seed page reads its Python child's lines, and the reference
runner's output."""
import importlib.util
import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from experiments.common.lines import BadLine, Samples, Timing, format_metadata, format_samples, format_timing, parse
from tests.helpers import ROOT, user_env

RUNNER = ROOT / "runners" / "reference_runner.py"


def python(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """`python ARGS` as a user runs it in `cwd` (so ./mlruns is the default store); stdout and stderr as bytes."""
    return subprocess.run([sys.executable, *args], cwd=cwd, env=user_env(), capture_output=True, timeout=900)


# --- parse and format ---------------------------------------------------------------------------------------------

GOOD = "TIMING\tJAX\tlenet\tinference\t32\t0.00123"


def test_round_trip():
    timings = [Timing("JAX", "lenet", "inference", 2, 4.33e-05), Timing("PyTorch", "resnet", "training", 8, 0.1),
               Timing("Lux", "mlp_relu", "inference", 2048, 1 / 3), Timing("X", "m", "grad", 1, 5e-324)]
    samples = [Samples("Lux", "mlp_relu", "inference", 2048, (1 / 3, 2.5e-07, 12.0))]
    text = "\n".join([format_metadata("JAX device", "cuda:0 (NVIDIA H200)"), format_metadata("empty", ""),
                      *map(format_timing, timings), *map(format_samples, samples)]) + "\n"
    p = parse(text)
    assert p.timings == timings and p.samples == samples
    assert p.metadata == {"JAX device": "cuda:0 (NVIDIA H200)", "empty": ""}
    assert p.time("Lux", "mlp_relu", "inference", 2048) == 1 / 3  # the seed's python_time
    with pytest.raises(KeyError):
        p.time("Lux", "mlp_relu", "inference", 4096)


def test_lines_end_as_julia_eachline_ends_them():
    assert parse("").timings == [] and parse(GOOD).timings == parse(GOOD + "\n").timings
    assert parse(GOOD + "\r\n").timings == parse([GOOD + "\n"]).timings == parse([GOOD]).timings
    with pytest.raises(BadLine, match="line 2: .*: ''"):
        parse(GOOD + "\n\n")  # an empty line: the seed's split gives one empty field, and it stops


@pytest.mark.parametrize("bad,reason", [
    ("", "not a TIMING, METADATA or SAMPLES line"),
    (" ", "not a TIMING, METADATA or SAMPLES line"),
    ("timing\tJAX\tlenet\tinference\t32\t0.1", "not a TIMING"),
    ("Epoch 1: loss 0.5", "not a TIMING"),
    ("TIMING\tJAX\tlenet\tinference\t32", "TIMING needs 6 tab-separated fields, got 5"),
    ("TIMING\tJAX\tlenet\tinference\t32\t0.1\t", "TIMING needs 6 tab-separated fields, got 7"),
    ("TIMING JAX lenet inference 32 0.1", "not a TIMING"),
    ("METADATA\tJAX device", "METADATA needs 3 tab-separated fields, got 2"),
    ("METADATA\tJAX device\tcpu\tx", "METADATA needs 3 tab-separated fields, got 4"),
    ("METADATA\t\tcpu", "empty field"),
    ("TIMING\t\tlenet\tinference\t32\t0.1", "empty field"),
    ("TIMING\tJAX\tlenet\tinference\t3.5\t0.1", "batch '3.5' is not a positive integer"),
    ("TIMING\tJAX\tlenet\tinference\tbs32\t0.1", "batch 'bs32'"),
    ("TIMING\tJAX\tlenet\tinference\t0\t0.1", "batch '0'"),
    ("TIMING\tJAX\tlenet\tinference\t-2\t0.1", "batch '-2'"),
    ("TIMING\tJAX\tlenet\tinference\t 32\t0.1", "batch ' 32'"),
    ("TIMING\tJAX\tlenet\tinference\t0x20\t0.1", "batch '0x20'"),
    ("TIMING\tJAX\tlenet\tinference\t32\tfast", "seconds 'fast' is not a finite positive decimal number"),
    ("TIMING\tJAX\tlenet\tinference\t32\tNaN", "seconds 'NaN'"),
    ("TIMING\tJAX\tlenet\tinference\t32\tnan", "seconds 'nan'"),
    ("TIMING\tJAX\tlenet\tinference\t32\tInf", "seconds 'Inf'"),
    ("TIMING\tJAX\tlenet\tinference\t32\t1e999", "seconds '1e999'"),
    ("TIMING\tJAX\tlenet\tinference\t32\t0", "seconds '0'"),
    ("TIMING\tJAX\tlenet\tinference\t32\t-0.1", "seconds '-0.1'"),
    ("TIMING\tJAX\tlenet\tinference\t32\t1_000.0", "seconds '1_000.0'"),
    ("TIMING\tJAX\tlenet\tinference\t32\t", "seconds ''"),
    ("SAMPLES\tJAX\tlenet\tinference\t32\t0.1,,0.2", "seconds ''"),
    ("SAMPLES\tJAX\tlenet\tinference\t32\t0.1,-0.2", "seconds '-0.2'"),
    (GOOD, "repeats the key of line 1"),
])
def test_malformed_lines_are_rejected_with_the_line_quoted(bad, reason):
    with pytest.raises(BadLine) as e:
        parse([GOOD, bad])
    assert str(e.value).startswith("line 2: ") and reason in str(e.value)
    assert str(e.value).endswith(repr(bad))


def test_strict_is_what_the_seed_page_accepts():
    text = GOOD + "\nSAMPLES\tJAX\tlenet\tinference\t32\t0.001,0.002\nMETADATA\tJAX device\tcpu\n"
    assert parse(text).samples == [Samples("JAX", "lenet", "inference", 32, (0.001, 0.002))]
    with pytest.raises(BadLine, match=r"line 2: not a TIMING or METADATA line \(SAMPLES is nnbench's"):
        parse(text, strict=True)
    assert parse(GOOD + "\nMETADATA\tJAX device\tcpu", strict=True).metadata == {"JAX device": "cpu"}


def test_a_long_line_is_quoted_in_part():
    bad = "SAMPLES\tJAX\tlenet\tinference\t32\t" + ",".join(["0.001"] * 1000) + ",x"
    with pytest.raises(BadLine, match=r"seconds 'x' .*\.\.\. \(6032 characters\)$") as e:
        parse([bad])
    assert len(str(e.value)) < 400


@pytest.mark.parametrize("make", [
    lambda: format_timing(Timing("JAX\t2", "lenet", "inference", 32, 0.1)),
    lambda: format_timing(Timing("JAX", "", "inference", 32, 0.1)),
    lambda: format_timing(Timing("JAX", "lenet", "inference", 0, 0.1)),
    lambda: format_timing(Timing("JAX", "lenet", "inference", True, 0.1)),
    lambda: format_timing(Timing("JAX", "lenet", "inference", 32, float("nan"))),
    lambda: format_timing(Timing("JAX", "lenet", "inference", 32, 0.0)),
    lambda: format_samples(Samples("JAX", "lenet", "inference", 32, ())),
    lambda: format_metadata("JAX device", "cpu\n"),
])
def test_format_refuses_what_would_not_parse(make):
    with pytest.raises(ValueError):
        make()


# --- the reference runner -----------------------------------------------------------------------------------------

@pytest.mark.slow
def test_reference_runner_output_parses(tmp_path):
    r = python(str(RUNNER), "--model", "mlp_relu", "--ops", "inference,training", "--batch-sizes", "2,8,32",
               "--budget-s", "0.05", cwd=tmp_path)
    assert r.returncode == 0, r.stderr.decode()
    p = parse(r.stdout.decode())
    expected = sorted(("Reference", "mlp_relu", op, bs) for op in ("inference", "training") for bs in (2, 8, 32))
    assert sorted(t.key for t in p.timings) == expected  # one TIMING per op × batch size
    assert sorted(s.key for s in p.samples) == expected
    samples = {s.key: s.seconds for s in p.samples}
    for t in p.timings:
        assert t.seconds == statistics.median(samples[t.key]) and len(samples[t.key]) >= 5
    assert p.metadata["Reference device"] == "cpu" and p.metadata["Reference version"] == np.__version__


def test_reference_runner_rejects_other_models(tmp_path):
    r = python(str(RUNNER), "--model", "lenet", "--batch-sizes", "2", cwd=tmp_path)
    assert r.returncode == 2 and r.stdout == b""
    assert r.stderr.decode().splitlines() == [
        "reference_runner: error: model 'lenet' is not supported: use one of mlp_relu"]


def test_reference_training_step_is_a_gradient_step(monkeypatch):
    spec = importlib.util.spec_from_file_location("reference_runner", RUNNER)
    ref = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, ref)  # dataclasses look their module up while it runs
    spec.loader.exec_module(ref)
    widths, rng = (6, 5, 5, 3), np.random.default_rng(1)
    params = ref.init(widths, np.float64)
    x, y = rng.standard_normal((4, 6)), rng.standard_normal((4, 3))
    loss, grads = ref.loss_and_grads(params, x, y)
    for p, g in zip(params, grads):  # central differences on a few entries of every parameter
        for i in rng.choice(p.size, 3, replace=False):
            old = p.flat[i]
            p.flat[i] = old + 1e-6
            up = ref.loss_and_grads(params, x, y)[0]
            p.flat[i] = old - 1e-6
            down = ref.loss_and_grads(params, x, y)[0]
            p.flat[i] = old
            assert g.flat[i] == pytest.approx((up - down) / 2e-6, rel=1e-5, abs=1e-8)
    adam = ref.Adam(params, lr=1e-2)
    for _ in range(20):
        adam.step(ref.loss_and_grads(params, x, y)[1])
    assert ref.loss_and_grads(params, x, y)[0] < loss

"""A store's medians as seed 000's lines: naming and folding, from runs shaped as mlflow.search_runs returns them."""
import pandas as pd
import pytest

from experiments.common.errors import BadInput
from experiments.common.lines import parse
from experiments.report.export import framework_name, lines
from experiments.report.tables import tidy


@pytest.mark.parametrize("mode,precision,name", [
    ("jax-jit", "fp32", "JAX"), ("torch-eager", "fp32", "PyTorch"), ("jax-eager", "fp32", "JAX-eager"),
    ("torch-compile", "fp32", "PyTorch-compile"), ("jax-jit", "bf16", "JAX-bf16"),
    ("torch-compile", "fp16", "PyTorch-compile-fp16"), ("Lux", "fp32", "Lux"), ("Lux", "fp64", "Lux-fp64"),
])
def test_framework_names(mode, precision, name):
    assert framework_name(mode, precision) == name


METRICS = ("median_s", "p25_s", "p75_s", "ci95_low_s", "ci95_high_s", "min_s", "mean_s", "std_s", "n_samples",
           "first_call_s", "throughput_samples_per_s")  # a measured op's metrics in the store


def fake_run(run_id, mode, median, batch=32, op="inference", device="cpu", **tags) -> dict:
    row = {"run_id": run_id, "start_time": pd.Timestamp("2026-01-01"), "tags.mlflow.runName": run_id,
           "params.framework": mode.split("-")[0], "params.mode": mode, "params.model": "lenet",
           "params.precision": "fp32", "params.batch_size": str(batch), "params.device": device}
    row |= {f"metrics.{op}_{s}": median for s in METRICS}
    return row | {f"tags.{k}": v for k, v in tags.items()}


def exported(*runs: dict) -> list[str]:
    return lines(tidy(pd.DataFrame(runs)))


def test_export_folds_replicates_into_the_median_of_their_medians():
    out = exported(fake_run("a", "jax-jit", 1.0, jax_version="0.10.2", device_name="cpu"),
                   fake_run("b", "jax-jit", 4.0, jax_version="0.10.2", device_name="cpu"),
                   fake_run("c", "torch-eager", 2.0, device="cuda:0", device_name="NVIDIA H200"),
                   fake_run("d", "torch-compile", 3.0, batch=8, op="training"))
    assert out == ["METADATA\tJAX device\tcpu", "METADATA\tJAX version\t0.10.2",
                   "METADATA\tPyTorch device\tcuda:0 (NVIDIA H200)", "METADATA\tPyTorch-compile device\tcpu",
                   "TIMING\tJAX\tlenet\tinference\t32\t2.5", "TIMING\tPyTorch\tlenet\tinference\t32\t2.0",
                   "TIMING\tPyTorch-compile\tlenet\ttraining\t8\t3.0"]
    assert parse(out, strict=True).time("JAX", "lenet", "inference", 32) == 2.5


def test_export_refuses_one_key_on_two_devices_or_versions():
    two_devices = r"JAX lenet inference bs32 comes from more than one point \(on cpu and cuda:0\): .* device="
    with pytest.raises(BadInput, match=two_devices):
        exported(fake_run("a", "jax-jit", 1.0), fake_run("b", "jax-jit", 1.0, device="cuda:0"))
    with pytest.raises(BadInput, match="jax_version 0.10.1 and 0.10.2: select one, e.g. jax_version=0.10.2"):
        exported(fake_run("a", "jax-jit", 1.0, jax_version="0.10.1"),
                 fake_run("b", "jax-jit", 1.0, jax_version="0.10.2"))

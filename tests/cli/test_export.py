"""`nnbench export` on a real store (seed 000's sweep, measured by the stand-in worker), and `nnbench sciml`, the
line checker."""
import io
import sys
from pathlib import Path

import pytest

from experiments import cli
from experiments.common.lines import parse
from tests.helpers import BRIEF, fake_interpreter, nnbench, run, with_store

# Every python_time(framework, model, operation, batch) the seed page calls, with the batch lists it loops over:
# mlp_relu and mlp_gelu at `batch_sizes` / `train_batch_sizes`, JAX and PyTorch; mlp_batchnorm at `bn_batch_sizes` /
# `train_batch_sizes`, PyTorch only ("JAX lacks a simple functional BatchNorm"); lenet at `lenet_batch_sizes` /
# `lenet_train_batch_sizes`, JAX and PyTorch; resnet at `resnet_batch_sizes` / `resnet_train_batch_sizes`, PyTorch only.
SEED_LOOKUPS = {  # model: (frameworks, inference batch sizes, training batch sizes)
    "mlp_relu": (("JAX", "PyTorch"), (2, 8, 32, 128, 512, 2048), (32, 128, 512, 2048)),
    "mlp_gelu": (("JAX", "PyTorch"), (2, 8, 32, 128, 512, 2048), (32, 128, 512, 2048)),
    "mlp_batchnorm": (("PyTorch",), (2, 8, 32, 128, 512, 2048), (32, 128, 512, 2048)),
    "lenet": (("JAX", "PyTorch"), (2, 8, 32, 128), (32, 128)),
    "resnet": (("PyTorch",), (2, 8, 32), (8, 32)),
}
SEED_KEYS = [(fw, model, op, bs) for model, (fws, inference, training) in SEED_LOOKUPS.items() for fw in fws
             for op, sizes in (("inference", inference), ("training", training)) for bs in sizes]
# The page's python_metadata[...] lookups: the two devices after the setup, all four in its appendix.
SEED_METADATA = ("JAX device", "PyTorch device", "JAX version", "PyTorch version")


GOOD = "TIMING\tJAX\tlenet\tinference\t32\t0.00123"


def test_the_checker_exits_2_with_the_line(monkeypatch, capsys):
    monkeypatch.setattr(sys, "stdin", io.StringIO(GOOD + "\nMETADATA\tJAX device\n"))
    assert cli.main(["sciml"]) == 2
    assert capsys.readouterr().err == "nnbench sciml: error: line 2: METADATA needs 3 tab-separated fields, " \
                                      "got 2: 'METADATA\\tJAX device'\n"


@pytest.fixture(scope="module")
def seed_store(tmp_path_factory) -> Path:
    """`experiment=seed000` run once in a fresh directory, measured by the stand-in worker (every sample of a point
    batch_size * 0.1 ms, each framework's version 0.fake): the export reads which points were measured, their medians
    and the runs' devices and versions, not how well they were measured; without the parity processes, whose tag it
    does not read; into an empty store made already (test_sweep.py's README sweep makes its own, with the real
    workers)."""
    cwd = with_store(tmp_path_factory.mktemp("seed000"))
    stand_in = fake_interpreter(tmp_path_factory.mktemp("python"))
    r = run(["-m", "experiment=seed000", *BRIEF, f"runtime.python={stand_in}", "parity=false"], cwd,
            FAKE_FAULT="none", FAKE_MEDIAN_PER_BATCH="1")
    assert r.returncode == 0, r.stderr[-3000:]
    return cwd


@pytest.fixture(scope="module")
def export_stdout(seed_store) -> str:
    r = nnbench("export", ["--format", "timing"], seed_store)
    assert r.returncode == 0, r.stderr
    assert r.stderr.splitlines()[-1].startswith("nnbench export: ")
    return r.stdout


@pytest.mark.slow
def test_export_has_every_key_the_seed_page_reads(export_stdout):
    assert len(SEED_KEYS) == 67
    p = parse(export_stdout, strict=True)  # the seed's own rules: any other line would stop it
    keys = {t.key for t in p.timings}
    assert [k for k in SEED_KEYS if k not in keys] == []
    assert all(p.time(*k) > 0 for k in SEED_KEYS)
    assert [k for k in SEED_METADATA if k not in p.metadata] == []
    assert p.metadata["JAX device"] == p.metadata["PyTorch device"] == "cpu"
    assert p.metadata["JAX version"] == p.metadata["PyTorch version"] == "0.fake"  # the workers', not this process's


@pytest.mark.slow
def test_export_timing_is_the_stored_median(seed_store, export_stdout):
    import mlflow

    mlflow.set_tracking_uri(f"sqlite:///{seed_store}/mlruns/mlflow.db")
    runs = mlflow.search_runs(experiment_names=["nnbench"], filter_string=(
        "params.mode = 'torch-eager' and params.model = 'lenet' and params.batch_size = '32'"))
    (stored,) = runs["metrics.training_median_s"]
    assert stored == pytest.approx(32e-4)  # the stand-in's, for batch size 32
    assert parse(export_stdout).time("PyTorch", "lenet", "training", 32) == stored


@pytest.mark.slow
def test_export_out_writes_the_same_bytes(seed_store, export_stdout, tmp_path):
    r = nnbench("export", ["--format", "timing", "--out", str(tmp_path / "t.tsv")], seed_store)
    assert r.returncode == 0 and r.stdout == ""
    assert (tmp_path / "t.tsv").read_bytes() == export_stdout.encode()


@pytest.mark.slow
def test_export_of_an_empty_selection_is_one_error_line(seed_store):
    r = nnbench("export", ["--format", "timing", "model=nosuchmodel"], seed_store)
    assert r.returncode == 2 and r.stdout == ""
    (line,) = r.stderr.splitlines()
    assert line.startswith("nnbench export: error: model=nosuchmodel matches no run in experiment 'nnbench'")

"""`nnbench history`: real runs in a real store with synthetic samples (a known truth), its exit code for a scheduled
job, the run it logs, and its error lines; `compare` no longer judges changes."""
import numpy as np
import pytest

from experiments.cli import main
from experiments.common.job import Job
from experiments.common.protocol import Measurement, OpResult, Point, PointResult
from experiments.measure.reading import read
from experiments.measure.stats import summarize
from experiments.store import records, tracking
from tests.helpers import config, nnbench, runs, with_store

TORCH = config("framework=torch", "device=cpu")


def log_point(uri, exp_id, version, median, rng, tmp, processes=5):
    """A torch LeNet bs32 inference run measured in `processes` processes, all around `median`."""
    point = Point(32, ("inference",))
    results = []
    for _ in range(processes):
        m = Measurement(list(median * rng.lognormal(0, 0.01, 30) * rng.lognormal(0, 0.02)), 1, 0.01, "ci", 0.1)
        op = OpResult("ok", device="cpu", measurement=m, stats=summarize([m], 32), calls_per_block=1)
        results.append(PointResult(32, "cpu", {"torch_version": version}, {"inference": op}))
    rec = records.build(Job(TORCH, None, (point,)), read(point, results))
    rec.save(tmp / version)
    tracking.Store(uri).log_record(exp_id, rec, tmp / version)


@pytest.fixture
def store(tmp_path):
    """torch 2.11.0, 2.12.0, 2.13.0 at 1.00 ms; a fourth version's level is up to each test."""
    uri = f"sqlite:///{with_store(tmp_path)}/mlruns/mlflow.db"
    exp = tracking.Store(uri).prepare("nnbench")
    rng = np.random.default_rng(0)
    for v in ("2.11.0", "2.12.0", "2.13.0"):
        log_point(uri, exp, v, 1.0e-3, rng, tmp_path)
    return tmp_path, uri, exp, rng


@pytest.mark.slow
@pytest.mark.parametrize("newest,code", [(1.3e-3, 1), (1.0e-3, 0)])
def test_fail_on_regression_is_a_new_slower_step(store, newest, code):
    tmp, uri, exp, rng = store
    log_point(uri, exp, "2.14.0", newest, rng, tmp)
    r = nnbench("history", ["--by", "torch_version", "--fail-on-regression", "--uri", uri, "--out", str(tmp / "rep")],
                tmp)
    assert r.returncode == code, r.stdout + r.stderr
    assert ("▲" in r.stdout) == (code == 1)
    assert "2.11.0 → 2.12.0 → 2.13.0 → 2.14.0" in r.stdout
    assert "verdicts unpaired:" in r.stdout and "nnbench ab AXIS=A,B, or nnbench versions SPECS --paired" in r.stdout
    assert {"report.md", "report.html", "regressions.csv", "series.csv", "trend_lenet_inference.png"} <= {
        p.name for p in (tmp / "rep").iterdir()}
    logged = runs(uri, parents=True)  # the history run: not a sweep, but tidy leaves it out the same way
    assert logged.empty and "history torch_version" in r.stdout


@pytest.mark.slow
def test_an_old_step_fails_only_since_it(store):
    tmp, uri, exp, rng = store
    log_point(uri, exp, "2.14.0", 1.3e-3, rng, tmp)
    log_point(uri, exp, "2.15.0", 1.3e-3, rng, tmp)
    assert nnbench("history", ["--by", "torch_version", "--fail-on-regression", "--uri", uri], tmp).returncode == 0
    since = nnbench("history", ["--by", "torch_version", "--fail-on-regression", "--since", "2.14.0", "--uri", uri],
                    tmp)
    assert since.returncode == 1 and "2.11.0…2.13.0 → 2.14.0…2.15.0" in since.stdout


@pytest.mark.parametrize("args,message", [
    (["--by", "nosuch_version"], "no tag or param 'nosuch_version' in the selected runs: use one of "),
    (["--by", "torch_version", "torch_version=2.11.0"], "the selected runs have one value of torch_version (2.11.0)"),
    (["--by", "torch_version", "--since", "9.9"], "--since 9.9 is not a value of torch_version in the selection"),
    (["--by", "torch_version", "--fdr", "2"], "argument --fdr: --fdr 2 is not between 0 and 1"),
])
def test_bad_input_is_one_line_and_exit_2(store, capsys, args, message):
    _, uri, _, _ = store
    try:
        code = main(["history", *args, "--uri", uri])
    except SystemExit as e:  # argparse's own errors
        code = e.code
    assert code == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"nnbench history: error: {message}"), line


def test_history_needs_an_axis_and_compare_no_longer_judges(capsys):
    for argv, message in ((["history"], "the following arguments are required: --by"),
                          (["compare", "--by", "jax_version"], "unrecognized arguments: --by")):
        with pytest.raises(SystemExit) as e:
            main(argv)
        assert e.value.code == 2 and message in capsys.readouterr().err

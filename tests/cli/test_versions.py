"""Following releases: `nnbench versions --unpaired`, `bisect --unpaired` and `history` end to end on a planted
regression served by a local package index (no network), a second real jax release, versions' paired comparisons of
adjacent versions, and their error lines. (bisect's paired search: tests/cli/test_bisect.py.)"""
import subprocess
import sys

import pandas as pd
import pytest

from experiments.cli import main
from experiments.selfcheck import planted
from tests.helpers import nnbench, run, runs

VERSIONS = [f"1.{i}" for i in range(8)]
# The planted package's own runner in each environment (an external runner: unpaired only): one point, its op 28 ms
# (20 + 32/4), 5 processes a version, no machine check before each sweep (it measures nothing the test reads).
POINT = ["framework=external", "external.name=planted", f"external.command='{planted.COMMAND}'", "ops=[inference]",
         "batch_size=32", "bench=quick", "bench.processes=5", "bench.machine_check_s=0"]
# A tiny torch point, for paired comparisons (an external runner can't be paired): each environment's interpreter
# imports torch from this one (nnbench-base.pth).
TORCH = ["framework=torch", "model=mlp_relu", "batch_size=2", "ops=[inference]", "framework.threads=1"]


@pytest.fixture
def offline(monkeypatch, tmp_path):
    """Only the test's own index, no network for uv, and a cache of environments of the test's own."""
    monkeypatch.setenv("PIP_CONFIG_FILE", "/dev/null")
    monkeypatch.setenv("UV_OFFLINE", "1")
    monkeypatch.setenv("NNBENCH_ENV_CACHE", str(tmp_path / "envs"))
    for var in ("PIP_FIND_LINKS", "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "UV_INDEX_URL", "UV_EXTRA_INDEX_URL",
                "UV_FIND_LINKS"):
        monkeypatch.delenv(var, raising=False)
    wheels = planted.wheels(tmp_path / "wheels", planted.steps(VERSIONS, "1.5", 1.3))
    return planted.index(wheels, tmp_path / "index")


@pytest.mark.slow
def test_a_planted_regression_is_measured_bisected_and_placed(offline, tmp_path):
    """versions measures all eight releases; bisect names 1.5 after measuring at most five; history puts exactly
    one change point at 1.5."""
    spec = f"nnbench-planted=={','.join(VERSIONS)}"
    r = nnbench("versions", [spec, "--unpaired", "--index-url", offline, "--", *POINT], tmp_path)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    df = points(f"sqlite:///{tmp_path}/mlruns/mlflow.db")
    assert sorted(df["tags.nnbench_planted_version"]) == sorted(df["params.nnbench_planted_version"]) == VERSIONS
    assert df["tags.env_fingerprint"].nunique() == 8 and set(df["tags.env_changes"]) == {
        f"nnbench-planted (none)→{v}" for v in VERSIONS}
    in_order = df.sort_values("start_time")["tags.nnbench_planted_version"].tolist()
    assert in_order == VERSIONS  # interleaved: one job per environment, in the spec's order
    assert "nnbench-planted==1.5" in " ".join(df["tags.mlflow.runName"])

    h = nnbench("history", ["--by", "nnbench_planted_version", "mode=planted", "--out", str(tmp_path / "h")], tmp_path)
    assert h.returncode == 0, h.stderr
    r = pd.read_csv(tmp_path / "h" / "regressions.csv", dtype=str)
    assert list(r["where"]) == ["1.5"] and list(r["verdict"]) == ["slower"], h.stdout

    b = nnbench("bisect", ["nnbench-planted", "1.0..1.7", "--unpaired", "--index-url", offline, "--uri",
                           f"sqlite:///{tmp_path}/bisect/mlflow.db", *POINT], tmp_path)
    assert b.returncode == 0, b.stdout[-3000:] + b.stderr[-3000:]
    assert "first changed at nnbench-planted 1.5 (1.4 → 1.5): slower" in b.stdout, b.stdout
    measured = next(ln for ln in b.stdout.splitlines() if ln.startswith("measured "))
    assert int(measured.split()[1]) <= 5, measured
    parents = runs(f"sqlite:///{tmp_path}/bisect/mlflow.db", parents=True)  # the sweeps, nested under the bisect
    bisect = runs_named(f"sqlite:///{tmp_path}/bisect/mlflow.db", "bisect nnbench-planted 1.0..1.7")
    assert bisect["tags.first_changed"] == "1.5" and set(parents["tags.mlflow.parentRunId"]) == {bisect["run_id"]}

    again = nnbench("bisect", ["nnbench-planted", "1.0..1.7", "--unpaired", "--index-url", offline, *POINT], tmp_path)
    assert again.returncode == 0 and "measured 0 of 8 versions" in again.stdout  # versions' runs, reused


@pytest.mark.parametrize("interrupted", [False, True])
def test_adjacent_versions_compared_paired(paired_store, tmp_path, monkeypatch, capsys, interrupted):
    """versions --paired: one paired comparison per adjacent pair of versions, in order, each logged under the
    versions' parent run and printed as paired; a Ctrl-C in one ends the parent KILLED (130) and compares no more.
    (The comparisons' own measuring and logging are nnbench ab's, tested in tests/cli/test_ab.py; here they stand
    in, so that three environments cost nothing to build.)"""
    import argparse
    import time
    from types import SimpleNamespace

    import mlflow

    from experiments.cli import ab, versions

    seen = []
    monkeypatch.setattr(ab, "checked", lambda key, vs, overrides, labels: ab.Comparison(
        key, tuple(vs), tuple(labels), overrides, ([], [])))

    def measured(comparison, design, threshold, alpha, out, logged, prog):
        seen.append(comparison.labels)
        if interrupted and len(seen) == 2:
            logged.close("KILLED", [], "interrupted")
            return None
        row = {"point": {"model": "mlp_relu", "op": "inference", "batch_size": 2}, "a": comparison.labels[0],
               "b": comparison.labels[1], "ratio": 1.01, "interval": [0.99, 1.03], "verdict": "inconclusive",
               "pairs": 2, "skipped": None, "oversubscribed": {}}
        logged.close("FINISHED", [row])
        return [row]

    monkeypatch.setattr(ab, "measure", measured)
    specs = [f"nnbench-planted==1.{i}" for i in range(3)]
    built = [SimpleNamespace(python=sys.executable, spec=spec) for spec in specs]
    a = argparse.Namespace(specs=["nnbench-planted==1.0,1.1,1.2"], overrides=TORCH, experiment="nnbench",
                           threshold=0.03, alpha=0.05)
    t0 = time.time()
    code = versions.compare_paired(a, paired_store, built, pairs_design())
    assert code == (130 if interrupted else 0)
    assert seen == list(zip(specs, specs[1:]))
    out = capsys.readouterr().out
    assert out.count("paired, B/A: ") == (1 if interrupted else 2)
    assert "paired, B/A: nnbench-planted==1.1 over nnbench-planted==1.0 (above 1: slower)" in out, out
    mlflow.set_tracking_uri(paired_store)
    df = mlflow.search_runs(experiment_names=["nnbench"], filter_string=f"attributes.start_time >= {int(t0 * 1e3)}")
    (parent,) = df[df["tags.nnbench.versions"] == "true"].itertuples()
    assert parent.status == ("KILLED" if interrupted else "FINISHED")
    compared = df[df["tags.nnbench.ab"] == "true"]
    assert set(compared["tags.mlflow.parentRunId"]) == {parent.run_id} and len(compared) == 2
    assert list(compared.sort_values("start_time")["status"]) == ["FINISHED", "KILLED" if interrupted else "FINISHED"]


@pytest.mark.parametrize("flag,paired", [([], True), (["--paired"], True), (["--unpaired"], False)])
def test_two_specs_compare_paired_unless_unpaired(offline, tmp_path, monkeypatch, flag, paired):
    """Two or more specs: the paired comparison of adjacent versions by default (--paired changes nothing), the
    unpaired sweep with --unpaired. (The environments and both paths stand in: each is tested on its own.)"""
    from types import SimpleNamespace

    from experiments.cli import versions

    monkeypatch.chdir(tmp_path)
    took = []
    monkeypatch.setattr(versions, "build", lambda specs, *args: [SimpleNamespace(spec=s) for s in specs])
    monkeypatch.setattr(versions, "compare_paired", lambda a, uri, built, design: took.append(("paired", design)) or 0)
    monkeypatch.setattr(versions, "measure", lambda a, uri, built: took.append(("unpaired", None)) or 0)
    assert main(["versions", "nnbench-planted==1.0,1.1", *flag, "--pairs", "4"][:None if paired else -2] + TORCH) == 0
    ((how, design),) = took
    assert how == ("paired" if paired else "unpaired") and (design.pairs == 4 if paired else design is None)


def pairs_design():
    from experiments.harness import pairs

    return pairs.Design(pairs=2, max_pairs=2, rounds=3)


def points(uri):
    """The point runs (not the sweeps', versions' or history's own runs)."""
    df = runs(uri)
    return df[df["params.model"].notna()]


def runs_named(uri, prefix):
    import mlflow

    mlflow.set_tracking_uri(uri)
    df = mlflow.search_runs(experiment_names=["nnbench"])
    return df[df["tags.mlflow.runName"].str.startswith(prefix)].iloc[0]


EXTERNAL = ("framework=external can't be paired: its runner times itself, so its bursts can't be interleaved with "
            "another worker's; add --unpaired")


@pytest.mark.parametrize("argv,message", [
    (["versions", "model=lenet"], "no spec given: name the versions, e.g. nnbench versions jax==0.10.0,0.10.1 "
                                  "model=lenet"),
    (["versions", "nnbench-planted==1.0", *POINT, "batchsize=3"], "unknown key 'batchsize'"),  # no -- needed
    (["versions", "nnbench-planted==1.0", "--", "runtime.python=/x"], "runtime.python is set by nnbench versions"),
    (["versions", "nnbench-planted==1.0", "--", *POINT, "batchsize=3"], "unknown key 'batchsize'"),
    (["versions", "nnbench-planted==9.9", "--", *POINT], "cannot install nnbench-planted==9.9: "),
    (["versions", "nnbench-planted==1.0,1.1", "--unpaired", "--pairs", "3", "--max-pairs", "6", "--", *TORCH],
     "--pairs, --max-pairs set the paired comparison of adjacent versions: drop --unpaired"),
    (["versions", "nnbench-planted==1.0", "--bursts", "9", "--", *TORCH],
     "--bursts set the paired comparison of adjacent versions: give two or more versions"),
    (["versions", "nnbench-planted==1.0", "--paired", "--", *TORCH], "--paired compares adjacent versions: give two"),
    (["versions", "nnbench-planted==1.0,1.1", "--bursts", "0", "--", *TORCH], "--bursts 0: at least 1"),
    (["versions", "nnbench-planted==1.0,1.1", "--paired", "--repeats", "2", "--", *TORCH],
     "--repeats replicates the unpaired sweep: add --unpaired, or set --pairs N"),
    (["versions", "nnbench-planted==1.0,1.1", "--", *POINT], EXTERNAL),
    (["versions", "nnbench-planted==1.0,1.1", "--paired", "--unpaired", "--", *TORCH],
     "argument --unpaired: not allowed with argument --paired"),
    (["bisect", "nnbench-planted", "1.0..1.7", "--unpaired", "--pairs", "3", *POINT],
     "--pairs set the paired comparison: drop --unpaired"),
    (["bisect", "nnbench-planted", "1.0..1.7", "--order", "random", "--unpaired", *POINT],
     "--order set the paired comparison: drop --unpaired"),
    (["bisect", "nnbench-planted", "1.0..1.7", *POINT], EXTERNAL),
    (["bisect", "nnbench-planted", "1.0..1.7", "--repeats", "2", *TORCH],
     "--repeats replicates the unpaired sweep: add --unpaired, or set --pairs N"),
    (["bisect", "nnbench-planted", "1.0..1.7", "--max-pairs", "3", *TORCH], "--max-pairs 3 is below --pairs 6"),
    (["bisect", "nnbench-planted", "1.1..1.1", *POINT], "nnbench-planted has 1 released version(s) in 1.1..1.1"),
    (["bisect", "nnbench-planted", "1.0.1.7", *POINT], "range '1.0.1.7' is not A..B"),
    (["bisect", "nnbench-nosuch", "1.0..1.7", *POINT], "cannot list the versions of nnbench-nosuch: "),
    (["bisect", "nnbench-planted", "1.0..1.7", *POINT, "ops=[inference,training]"],
     "the overrides make 2 measured ops; bisect follows one"),
    (["bisect", "nnbench-planted", "1.0..1.7", "--unpaired", *POINT, "bench.processes=1"],
     "bisect --unpaired judges versions by their processes, and this sweep measures one per version"),
])
def test_bad_input_is_one_line_before_anything_is_built_or_measured(offline, tmp_path, monkeypatch, capsys, argv,
                                                                    message):
    monkeypatch.chdir(tmp_path)
    index = ["--index-url", offline]
    at = argv.index("--") if "--" in argv else len(argv)
    assert exit_code(argv[:at] + index + argv[at:]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"nnbench {argv[0]}: error: {message}"), line
    assert not (tmp_path / "mlruns" / "mlflow.db").exists()
    assert not (tmp_path / "envs").exists() or not any(p.is_dir() for p in (tmp_path / "envs").iterdir())


def exit_code(argv: list[str]) -> int:
    """main's return code, or its exit code where argparse's own errors exit."""
    try:
        return main(argv)
    except SystemExit as e:
        return e.code


def test_list_and_clean_an_empty_cache(offline, capsys):
    assert main(["versions", "--list"]) == 0 and capsys.readouterr().out.strip().startswith("0 environments in ")
    assert main(["versions", "--clean"]) == 0 and capsys.readouterr().out.startswith("removed 0 environments")


OLD_JAX = "0.10.1"


@pytest.mark.slow
def test_a_second_jax_release(tmp_path, monkeypatch):
    """This jax and jax 0.10.1 (from the package index: skipped where it can't be had), interleaved, two rounds:
    the versions come from the workers' own interpreters."""
    import jax

    if jax.__version__ == OLD_JAX:
        pytest.skip("this environment already has the older jax")
    monkeypatch.setenv("NNBENCH_ENV_CACHE", str(tmp_path / "envs"))
    r = nnbench("versions", [f"jax=={OLD_JAX},{jax.__version__}", "--unpaired", "--repeats", "2", "--",
                             "framework=jax", "model=mlp_relu", "batch_size=2", "ops=[inference]", "bench=quick",
                             "bench.processes=2", "bench.max_time_s=0.2", "bench.machine_check_s=0"], tmp_path)
    if r.returncode and "cannot install" in r.stderr:
        pytest.skip(f"jax {OLD_JAX} can't be installed here: {r.stderr.strip()[-300:]}")
    assert r.returncode == 0, r.stderr[-3000:]
    df = points(f"sqlite:///{tmp_path}/mlruns/mlflow.db")
    in_order = df.sort_values("start_time")["tags.jax_version"].tolist()
    assert in_order == [OLD_JAX, jax.__version__] * 2  # interleaved rounds
    assert df["tags.env_fingerprint"].nunique() == 2 and set(df["tags.env_spec"]) == {
        f"jax=={OLD_JAX}", f"jax=={jax.__version__}"}
    assert set(df[df["tags.jax_version"] == OLD_JAX]["tags.jaxlib_version"]) == {OLD_JAX}  # jaxlib came along
    assert f"points along jax_version: {OLD_JAX} → {jax.__version__}" in r.stdout


@pytest.mark.slow
def test_interpreter_without_the_framework_is_a_clear_error(tmp_path):
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "bare")], check=True)
    r = run(["framework=jax", "model=lenet", f"runtime.python={tmp_path / 'bare' / 'bin' / 'python'}"], cwd=tmp_path)
    assert r.returncode != 0
    last = r.stderr.strip().splitlines()[-1]
    assert "cannot measure framework=jax" in last and "No module named" in last and "nnbench versions" in last
    assert not (tmp_path / "mlruns" / "mlflow.db").exists()

"""Following releases: `nnbench versions --unpaired`, `bisect --unpaired` and `history` end to end on a planted
regression served by a local package index (no network), a second real jax release; `versions` paired (the default):
one paired sweep along the environments, each version against the one before it, on nnbench-planted's network, its
verdicts, its gate, the upstream report it drafts for the slower cell and the history it leaves; and their error
lines. (bisect paired: tests/cli/test_bisect.py.)"""
import json
import math
import re
import subprocess
import sys

import mlflow
import pandas as pd
import pytest

from experiments.cli import main
from experiments.harness import manager
from experiments.selfcheck import planted as plant
from tests.cli.conftest import INDEX_VARIABLES, PLANTED_POINT, paired_point, script
from tests.helpers import OLD_JAX, nnbench, run, run_cache, runs, with_store

VERSIONS = [f"1.{i}" for i in range(5)]
# The planted package's own runner in each environment (an external runner: unpaired only): one point, its op 44 ms
# (20 + 96/4), 3 processes of 5 calls a version, no machine check before each sweep (it measures nothing the test
# reads).
POINT = ["framework=external", "external.name=planted", f"external.command='{plant.COMMAND} --calls 5 --warmup 1'",
         "ops=[inference]", "batch_size=96", "bench=quick", "bench.processes=3", "bench.max_time_s=0.2",
         "bench.machine_check_s=0"]
# Judged unpaired, versions measured apart in time: on a loaded machine a call can overrun by a scheduler tick or a
# few (4 ms each), which moves a whole version's median. 25% lies about three ticks clear of both that and the step.
UNPAIRED = ["--unpaired", "--threshold", "25%"]
# A tiny torch point, for paired comparisons (an external runner can't be paired): each environment's interpreter
# imports torch from this one (nnbench-base.pth).
TORCH = ["framework=torch", "model=mlp_relu", "batch_size=2", "ops=[inference]", "framework.threads=1"]


@pytest.fixture(scope="module")
def index(tmp_path_factory) -> str:
    """VERSIONS of nnbench-planted, a step of 60% at 1.3, on a local package index (built once for the module)."""
    root = tmp_path_factory.mktemp("planted-steps")
    return plant.index(plant.wheels(root / "wheels", plant.steps(VERSIONS, "1.3", 1.6)), root / "index")


@pytest.fixture
def offline(index, monkeypatch, tmp_path):
    """Only that index, no network for uv, and a cache of environments of the test's own."""
    monkeypatch.setenv("PIP_CONFIG_FILE", "/dev/null")
    monkeypatch.setenv("UV_OFFLINE", "1")
    monkeypatch.setenv("NNBENCH_ENV_CACHE", str(tmp_path / "envs"))
    for var in INDEX_VARIABLES:
        monkeypatch.delenv(var, raising=False)
    return index


@pytest.mark.slow
def test_a_planted_regression_is_measured_bisected_and_placed(offline, tmp_path):
    """versions measures all five releases; bisect names 1.3 after measuring at most four; history puts exactly
    one change point at 1.3."""
    spec = f"nnbench-planted=={','.join(VERSIONS)}"
    r = nnbench("versions", [spec, "--unpaired", "--index-url", offline, "--", *POINT], with_store(tmp_path))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    df = points(f"sqlite:///{tmp_path}/mlruns/mlflow.db")
    assert sorted(df["tags.nnbench_planted_version"]) == sorted(df["params.nnbench_planted_version"]) == VERSIONS
    assert set(df["tags.design"]) == {"unpaired"}
    assert df["tags.env_fingerprint"].nunique() == 5 and set(df["tags.env_changes"]) == {
        f"nnbench-planted (none)→{v}" for v in VERSIONS}
    in_order = df.sort_values("start_time")["tags.nnbench_planted_version"].tolist()
    assert in_order == VERSIONS  # interleaved: one job per environment, in the spec's order
    assert "nnbench-planted==1.3" in " ".join(df["tags.mlflow.runName"])

    h = nnbench("history", ["--by", "nnbench_planted_version", "mode=planted", "--threshold", "25%", "--out",
                            str(tmp_path / "h")], tmp_path)
    assert h.returncode == 0, h.stderr
    r = pd.read_csv(tmp_path / "h" / "regressions.csv", dtype=str)
    assert list(r["where"]) == ["1.3"] and list(r["verdict"]) == ["slower"], h.stdout

    with_store(tmp_path, "bisect/mlflow.db")
    b = nnbench("bisect", ["nnbench-planted", "1.0..1.4", *UNPAIRED, "--index-url", offline, "--uri",
                           f"sqlite:///{tmp_path}/bisect/mlflow.db", *POINT], tmp_path)
    assert b.returncode == 0, b.stdout[-3000:] + b.stderr[-3000:]
    assert "first changed at nnbench-planted 1.3 (1.2 → 1.3): slower" in b.stdout, b.stdout
    measured = next(ln for ln in b.stdout.splitlines() if ln.startswith("measured "))
    assert int(measured.split()[1]) <= 4, measured
    parents = runs(f"sqlite:///{tmp_path}/bisect/mlflow.db", parents=True)  # the sweeps, nested under the bisect
    bisect = runs_named(f"sqlite:///{tmp_path}/bisect/mlflow.db", "bisect nnbench-planted 1.0..1.4")
    assert bisect["tags.first_changed"] == "1.3" and set(parents["tags.mlflow.parentRunId"]) == {bisect["run_id"]}

    again = nnbench("bisect", ["nnbench-planted", "1.0..1.4", *UNPAIRED, "--index-url", offline, *POINT], tmp_path)
    assert again.returncode == 0 and "measured 0 of 5 versions" in again.stdout  # versions' runs, reused


@pytest.fixture(scope="module")
def compared(planted, tmp_path_factory):
    """`nnbench versions nnbench-planted==1.0,1.0.1,2.0` on the planted network, gated, as JSON, each slower or faster
    cell profiled and an upstream report drafted for each slower one: one paired sweep along the environments, 1.0.1
    against 1.0 (the same work: A/A) and 2.0 against 1.0.1 (twice the work). Its process, store and drafts folder."""
    tmp = with_store(tmp_path_factory.mktemp("versions"))
    with planted.offline():
        r = nnbench("versions", [f"{planted_spec('1.0', '1.0.1', '2.0')}", "--index-url", planted.url, *PLANTED_POINT,
                                 *PAIRED_DESIGN, "--fail-on-regression", "--json", "--profile",
                                 "--issue", str(tmp / "drafts")], tmp)
    return r, f"sqlite:///{tmp}/mlruns/mlflow.db", tmp / "drafts"


def planted_spec(*versions: str) -> str:
    return f"{plant.PROJECT}=={','.join(versions)}"


# Two pairs at first, up to six while a cell is unsettled; no change within ±10%, so that an A/A can't cross it and
# the planted 2.0's twice the work can't be missed, even on a busy machine (a 30% step was, once in some ten runs).
PAIRED_DESIGN = ["--pairs", "2", "--max-pairs", "6", "--bursts", "5", "--threshold", "10%"]


@pytest.mark.slow
def test_adjacent_versions_are_compared_in_one_paired_sweep(compared):
    """Each version against the one before it: 1.0.1 over 1.0 not slower, 2.0 over 1.0.1 slower; --json prints the
    verdicts (nnbench.paired/1) and the versions' parent run, --fail-on-regression exits 1 naming only 2.0's cell;
    --profile says where 2.0's time went (its twice as many matmuls), and only there."""
    r, _, _ = compared
    assert r.returncode == 1, r.stdout[-3000:] + r.stderr[-3000:]
    got = json.loads(r.stdout)
    assert got["schema"] == "nnbench.paired/1" and got["command"] == "versions" and got["exit"] == 0
    assert got["specs"] == [f"{plant.PROJECT}=={v}" for v in ("1.0", "1.0.1", "2.0")]
    label = f"torch-eager fp32 runtime.python={plant.PROJECT}=="
    cells = {(c["baseline"].removeprefix(label), c["variant"].removeprefix(label)): c for c in got["cells"]}
    assert set(cells) == {("1.0", "1.0.1"), ("1.0.1", "2.0")}
    aa, slower = cells[("1.0", "1.0.1")], cells[("1.0.1", "2.0")]
    assert aa["verdict"] in ("no change", "inconclusive") and 0.8 < aa["ratio"] < 1.25, aa
    assert slower["verdict"] == "slower" and slower["ratio"] > 1.3, slower
    assert aa["profile"] is None and "matmul +" in slower["profile"]["said"]  # only a changed cell is profiled
    assert all((c["model"], c["op"], c["batch_size"]) == (plant.NAME, "inference", 32) for c in cells.values())
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith(f"nnbench versions: error: slower: planted inference bs32 {label}2.0 over {label}1.0.1 ")
    assert f"{label}1.0.1 over" not in last


@pytest.mark.slow
def test_the_paired_sweep_is_logged_under_the_versions_parent(compared):
    """The versions' parent run holds one sweep along runtime.python, whose point runs carry each environment's
    spec and versions; B's verdicts match what was printed."""
    r, uri, _ = compared
    got = json.loads(r.stdout)
    mlflow.set_tracking_uri(uri)
    df = mlflow.search_runs(experiment_names=["nnbench"])
    (parent,) = df[df["tags.nnbench.versions"] == "true"].to_dict("records")
    assert parent["run_id"] == got["parent_run_id"] and parent["status"] == "FINISHED"
    assert parent["params.paired"] == "true"
    (sweep,) = df[df["tags.nnbench.sweep"] == "true"].to_dict("records")
    assert sweep["tags.mlflow.parentRunId"] == parent["run_id"] and sweep["status"] == "FINISHED"
    points = df[df["params.model"] == plant.NAME]
    assert set(points["tags.mlflow.parentRunId"]) == {sweep["run_id"]} and set(points["status"]) == {"FINISHED"}
    assert sorted(points["tags.nnbench_planted_version"]) == ["1.0", "1.0.1", "2.0"]
    assert sorted(points["tags.env_spec"]) == [f"{plant.PROJECT}=={v}" for v in ("1.0", "1.0.1", "2.0")]
    assert set(points["params.config.report.along"]) == {"runtime.python"}
    judged = points.set_index("run_id").loc[[c["run_id"] for c in got["cells"]]]
    assert list(judged["tags.inference_verdict"]) == [c["verdict"] for c in got["cells"]]


@pytest.mark.slow
def test_versions_writes_a_draft_naming_the_slower_cell(compared):
    """--issue DIR: one draft, for 2.0's cell (1.0.1's A/A is not slower), naming both versions, how to build the two
    environments and the command that measured it, beside its script, its sides and both exported steps."""
    r, _, drafts = compared
    (draft,) = drafts.glob("*/draft.md")
    assert f"upstream draft: {draft}" in r.stderr
    text = draft.read_text()
    title = rf"# torch inference step [\d.]+x slower with {plant.PROJECT}==2.0 than with {plant.PROJECT}==1.0.1"
    assert re.match(title + r" \(batch size 32, fp32, cpu\)", text), text[:300]
    assert f"Packages that differ: {plant.PROJECT} 1.0.1 (A) / 2.0 (B)." in text
    assert "venv/bin/pip install torch==" in text and f"nnbench versions {planted_spec('1.0', '1.0.1', '2.0')} " in text
    assert {p.name for p in draft.parent.iterdir()} == {"draft.md", "repro.py", "repro.json", "a.pt2", "b.pt2"}


@pytest.mark.slow
def test_the_drafts_script_shows_the_regression_without_nnbench(compared, clean):
    """The draft's repro.py, run by an interpreter that has torch but not nnbench: B (2.0, twice the matmuls) is
    the slower side."""
    _, _, drafts = compared
    (folder,) = (d.parent for d in drafts.glob("*/draft.md"))
    r = script(folder, clean)
    assert r.returncode == 0, r.stderr
    medians = [float(m) for m in re.findall(r"median ([\d.e-]+) ms per step", r.stdout)]
    assert len(medians) == 2 and medians[1] > medians[0], r.stdout


@pytest.mark.slow
def test_history_reads_what_the_paired_versions_stored(compared, tmp_path):
    """`nnbench history --by nnbench_planted_version` after the paired versions: the one point along the three
    versions, from the runs under the versions' parent."""
    _, uri, _ = compared
    h = nnbench("history", ["--by", "nnbench_planted_version", "--json", "--uri", uri], tmp_path)
    assert h.returncode == 0, h.stderr[-3000:]
    got = json.loads(h.stdout)
    assert got["values"] == ["1.0", "1.0.1", "2.0"]
    assert [(p["model"], p["variant"], p["value"], p["runs"]) for p in got["points"]] == [
        (plant.NAME, "torch-eager fp32", v, 1) for v in ("1.0", "1.0.1", "2.0")]


@pytest.mark.parametrize("log_ratio,code", [(0.0, 0), (math.log(2), 1)], ids=["as-fast", "twice-as-slow"])
def test_the_gate_fails_only_where_a_version_is_slower_than_the_one_before(paired_store, monkeypatch, capsys,
                                                                           log_ratio, code):
    """--fail-on-regression on the paired verdicts: 1.1 as fast as 1.0 (its trials' log ratios 1% about 0) exits 0
    with the table printed and no error line; twice as slow exits 1, naming the cell in its one error line, the last.
    (The sweep stands in, saving B's point as the paired sweep does; the real A/A is the `compared` fixture's.)"""
    from types import SimpleNamespace

    from experiments.compare import across_envs, paired, versions
    from experiments.stats.paired import judge_pairs

    label = "torch-eager fp32 runtime.python={}".format

    def sweep(overrides, out, uri, experiment, parent=None, quiet=False):
        (c,) = judge_pairs([[log_ratio + 0.01 * (-1) ** k for k in range(4)]], 0.1, 0.05)
        paired_point(out, label("1.1"), label("1.0"), c, {"model": "mlp_relu", "ops": "inference", "batch_size": "2"},
                     "bs2")
        return 0

    monkeypatch.setattr(paired, "sweep", sweep)
    built = [SimpleNamespace(python=f"/envs/{v}/bin/python", spec=f"{plant.PROJECT}=={v}") for v in ("1.0", "1.1")]
    v = versions.Versions((f"{plant.PROJECT}==1.0,1.1",), (), across_envs.Sweep("versions", tuple(TORCH), paired_store,
                          "nnbench"), None, paired.Design(pairs=4, threshold=0.1), fail_on_regression=True)
    got, answer = versions.compare_paired(v, built)
    out, err = capsys.readouterr()
    (cell,) = answer["cells"]
    assert got == code and cell["verdict"] == ("no change" if code == 0 else "slower"), (got, cell)
    (row,) = [ln for ln in out[out.index("paired: each B over its A (above 1: B is slower)"):].splitlines()
              if ln.startswith("| mlp_relu")]
    assert f"| {cell['verdict']} " in row, row
    errors = [ln for ln in err.splitlines() if ln.startswith("nnbench")]
    assert errors == ([] if code == 0 else [err.strip().splitlines()[-1]]), err
    assert code == 0 or errors[0].startswith(f"nnbench versions: error: slower: mlp_relu inference bs2 {label('1.1')} "
                                             f"over {label('1.0')} ")


def test_a_paired_sweep_stopped_by_a_signal_ends_the_versions_killed(paired_store, monkeypatch, capsys):
    """A Ctrl-C passed on to the paired sweep: the sweep said so in its own line and exited 130; versions closes its
    parent KILLED and adds no line, and main() then exits 130. (The sweep stands in: its own interrupt is
    tests/cli/test_ab.py's.)"""
    import time
    from types import SimpleNamespace

    from experiments.compare import across_envs, paired, versions

    asked = []
    monkeypatch.setattr(paired, "sweep", lambda overrides, out, uri, experiment, parent=None, quiet=False:
                        asked.append((overrides, parent)) or 130)
    built = [SimpleNamespace(python=f"/envs/{v}/bin/python", spec=f"{plant.PROJECT}=={v}") for v in ("1.0", "1.1")]
    sweep = across_envs.Sweep("versions", tuple(TORCH), paired_store, "nnbench")
    v = versions.Versions((f"{plant.PROJECT}==1.0,1.1",), (), sweep, None, paired.Design(pairs=2),
                          fail_on_regression=True)
    t0 = time.time()
    assert versions.compare_paired(v, built) == (130, {})
    out, err = capsys.readouterr()
    assert not err and "paired:" not in out
    ((overrides, parent),) = asked
    assert overrides[0] == "runtime.python='/envs/1.0/bin/python','/envs/1.1/bin/python'"
    assert "report.along=runtime.python" in overrides and "bench.processes=2" in overrides
    mlflow.set_tracking_uri(paired_store)
    df = mlflow.search_runs(experiment_names=["nnbench"], filter_string=f"attributes.start_time >= {int(t0 * 1e3)}")
    assert list(zip(df["run_id"], df["status"], df["tags.nnbench.versions"])) == [(parent, "KILLED", "true")]


@pytest.mark.parametrize("flag,paired", [([], True), (["--paired"], True), (["--unpaired"], False)])
def test_two_specs_compare_paired_unless_unpaired(offline, tmp_path, monkeypatch, flag, paired):
    """Two or more specs: the paired comparison of adjacent versions by default (--paired changes nothing), the
    unpaired sweep with --unpaired. (The environments and both paths stand in: each is tested on its own.)"""
    from types import SimpleNamespace

    from experiments.compare import versions

    monkeypatch.chdir(tmp_path)
    took = []
    monkeypatch.setattr(versions, "build", lambda specs, *args: [SimpleNamespace(spec=s) for s in specs])
    monkeypatch.setattr(versions, "compare_paired", lambda v, built: took.append(("paired", v.design)) or (0, {}))
    monkeypatch.setattr(versions, "measure", lambda v, built: took.append(("unpaired", None)) or (0, {}))
    assert main(["versions", "nnbench-planted==1.0,1.1", *flag, "--pairs", "4"][:None if paired else -2] + TORCH) == 0
    ((how, design),) = took
    assert how == ("paired" if paired else "unpaired") and (design.pairs == 4 if paired else design is None)


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
    (["versions", "nnbench-planted==1.0,1.1", "--unpaired", "--issue", "drafts", "--", *TORCH],
     "--issue set the paired comparison of adjacent versions: drop --unpaired"),
    (["versions", "nnbench-planted==1.0", "--bursts", "9", "--", *TORCH],
     "--bursts set the paired comparison of adjacent versions: give two or more versions"),
    (["versions", "nnbench-planted==1.0", "--paired", "--", *TORCH], "--paired compares adjacent versions: give two"),
    (["versions", "nnbench-planted==1.0,1.1", "--bursts", "0", "--", *TORCH],
     "argument --bursts: --bursts 0 must be above 0"),
    (["versions", "nnbench-planted==1.0,1.1", "--max-pairs", "3", "--", *TORCH],
     "--max-pairs 3 is below --pairs 5 (bench.processes of the bench preset)"),
    (["versions", "nnbench-planted==1.0,1.1", "--pairs", "1", "--", *TORCH], "--pairs 1: at least 2"),
    (["versions", "nnbench-planted==1.0,1.1", "--paired", "--repeats", "2", "--", *TORCH],
     "--repeats replicates the unpaired sweep: add --unpaired, or set --pairs N"),
    (["versions", "nnbench-planted==1.0,1.1", "--", *POINT], EXTERNAL),
    (["versions", "nnbench-planted==1.0,1.1", "--paired", "--unpaired", "--", *TORCH],
     "argument --unpaired: not allowed with argument --paired"),
    (["bisect", "nnbench-planted", "1.0..1.4", "--unpaired", "--pairs", "3", *POINT],
     "--pairs set the paired comparison: drop --unpaired"),
    (["bisect", "nnbench-planted", "1.0..1.4", "--unpaired", "--issue", "drafts", *POINT],
     "--issue set the paired comparison: drop --unpaired"),
    (["bisect", "nnbench-planted", "1.0..1.4", "--order", "random", *TORCH], "unrecognized arguments: --order"),
    (["bisect", "nnbench-planted", "1.0..1.4", *POINT], EXTERNAL),
    (["bisect", "nnbench-planted", "1.0..1.4", "--repeats", "2", *TORCH],
     "--repeats replicates the unpaired sweep: add --unpaired, or set --pairs N"),
    (["bisect", "nnbench-planted", "1.0..1.4", "--max-pairs", "3", *TORCH],
     "--max-pairs 3 is below --pairs 5 (bench.processes of the bench preset)"),
    (["bisect", "nnbench-planted", "1.1..1.1", *POINT], "nnbench-planted has 1 released version(s) in 1.1..1.1"),
    (["bisect", "nnbench-planted", "1.0.1.4", *POINT], "range '1.0.1.4' is not A..B"),
    (["bisect", "nnbench-nosuch", "1.0..1.4", *POINT], "cannot list the versions of nnbench-nosuch: "),
    (["bisect", "nnbench-planted", "1.0..1.4", *POINT, "ops=[inference,training]"],
     "the overrides make 2 measured ops; bisect follows one"),
    (["bisect", "nnbench-planted", "1.0..1.4", "--unpaired", *POINT, "bench.processes=1"],
     "bisect --unpaired judges versions by their processes, and this sweep measures one per version"),
])
def test_bad_input_is_one_line_before_anything_is_built_or_measured(offline, tmp_path, monkeypatch, capsys, argv,
                                                                    message):
    monkeypatch.chdir(tmp_path)
    probed = []  # a design that doesn't fit the sweep is found before the probes
    monkeypatch.setattr(manager, "probe", lambda asks: probed.append(asks) or [(None, None)] * len(asks))
    index = ["--index-url", offline]
    at = argv.index("--") if "--" in argv else len(argv)
    assert exit_code(argv[:at] + index + argv[at:]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"nnbench {argv[0]}: error: {message}"), line
    assert not (probed and message.startswith(("--max-pairs", "framework=external"))), probed
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


@pytest.mark.slow
def test_a_second_jax_release(tmp_path, tmp_path_factory, monkeypatch):
    """This jax and jax 0.10.1 (from the package index: skipped where it can't be had), unpaired, interleaved, two
    rounds: the versions come from the workers' own interpreters."""
    import jax

    if jax.__version__ == OLD_JAX:
        pytest.skip("this environment already has the older jax")
    monkeypatch.setenv("NNBENCH_ENV_CACHE", str(run_cache(tmp_path_factory, "jax-envs")))
    r = nnbench("versions", [f"jax=={OLD_JAX},{jax.__version__}", "--unpaired", "--repeats", "2", "--",
                             "framework=jax", "model=mlp_relu", "batch_size=2", "ops=[inference]", "bench=quick",
                             "bench.processes=2", "bench.max_time_s=0.2", "bench.machine_check_s=0"], tmp_path)
    if r.returncode and "cannot install" in r.stderr:
        pytest.skip(f"jax {OLD_JAX} can't be installed here: {r.stderr.strip()[-300:]}")
    assert r.returncode == 0, r.stderr[-3000:]
    df = points(f"sqlite:///{tmp_path}/mlruns/mlflow.db")
    in_order = df.sort_values("start_time")["tags.jax_version"].tolist()
    assert in_order == [OLD_JAX, jax.__version__] * 2  # interleaved rounds
    assert set(df["tags.design"]) == {"unpaired"}  # each point measured by processes of its own, as Welch's t reads
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

"""Every command's door, as a new user knocks: bad inputs and interrupts each give one line on stderr naming the fix,
a non-zero exit and no traceback. In-process (`main(argv)`) against one small real store made once; subprocesses only
where a signal must reach a process."""
import json
from importlib.metadata import version

import numpy as np
import pytest

from experiments.cli import main
from experiments.common.job import Job
from experiments.common.protocol import Measurement, OpResult, Point, PointResult
from experiments.measure.reading import read
from experiments.measure.stats import summarize
from experiments.store import records, tracking
from experiments.sweep import hydra_errors
from tests.helpers import OLD_JAX, config, run_cache, with_store
from tests.helpers.interrupts import interrupted

TORCH = config("framework=torch", "device=cpu")


def log_point(uri, exp_id, parent, version, median, batch, rng, tmp):
    """A torch LeNet inference run at `batch`, measured in 3 processes around `median`, under the sweep `parent`."""
    point, results = Point(batch, ("inference",)), []
    for _ in range(3):
        m = Measurement(list(median * rng.lognormal(0, 0.01, 30)), 1, 0.01, "ci", 0.1)
        op = OpResult("ok", device="cpu", measurement=m, stats=summarize([m], batch), calls_per_block=1)
        results.append(PointResult(batch, "cpu", {"torch_version": version}, {"inference": op}))
    rec = records.build(Job(TORCH, None, (point,)), read(point, results))
    where = tmp / f"{version}-{batch}"
    rec.save(where)
    tracking.Store(uri).log_record(exp_id, rec, where, parent)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """Two sweeps of torch LeNet inference at batch 32 and 128: torch 2.12.0, then 2.13.0 30% slower."""
    tmp = tmp_path_factory.mktemp("doors")
    with_store(tmp)
    (tmp / "empty").mkdir()
    (tmp / "junk.db").write_bytes(b"not a database" * 100)
    (tmp / "lines.txt").write_text("TIMING\tJAX\tlenet\t32\t0.001\n")
    uri = f"sqlite:///{tmp}/mlruns/mlflow.db"
    exp = tracking.Store(uri).prepare("nnbench")
    rng, sweeps = np.random.default_rng(0), []
    for version, median in (("2.12.0", 1e-3), ("2.13.0", 1.3e-3)):
        sweeps.append(tracking.Store(uri).start_parent(exp, f"sweep {version}", {}))
        for batch in (32, 128):
            log_point(uri, exp, sweeps[-1], version, median * batch / 32, batch, rng, tmp)
        tracking.Store(uri).set_status(sweeps[-1], "FINISHED")
    return tmp, uri, sweeps


def call(argv, capsys):
    try:
        code = main(argv)
    except SystemExit as e:  # argparse's errors
        code = e.code
    out = capsys.readouterr()
    return code, [ln for ln in out.err.splitlines() if ln.strip()], out.out


S = "{uri}"  # the store, filled in per case
# A model= no built-in network has may be one the environments compared declare: `versions` builds both jax
# environments (seconds of CPU) before it answers, into the run's cache that tests/cli/test_versions.py's second jax
# release shares (whichever runs second finds them built).
BUILDS = ["versions", f"jax=={OLD_JAX},{version('jax')}", "--", "model=lenett"]
BAD = [  # argv, exit code, words the one line must hold
    # the command itself
    (["comapre"], 2, ["no command 'comapre'", "did you mean nnbench compare?"]),
    (["histroy", "--by", "x"], 2, ["did you mean nnbench history?"]),
    (["frobnicate"], 2, ["no command 'frobnicate'", "use one of run, compare"]),
    ([], 2, ["required: COMMAND"]),
    # the store, for a reading command
    (["compare", "--uri", "http://127.0.0.1:9"], 2, ["http://127.0.0.1:9", "Connection refused",
                                                     "start the tracking server, or point --uri"]),
    (["compare", "--uri", "./mlruns"], 2, ["no ./mlruns file store", "--uri sqlite:///"]),
    (["compare", "--uri", "file:///tmp/mlruns"], 2, ["no ./mlruns file store"]),
    (["compare", "--uri", "sqlite:///nonexist/x.db"], 2, ["no store at sqlite:///nonexist/x.db", "fix --uri"]),
    (["compare", "--uri", "sqlite:///{tmp}"], 2, ["is a directory", "mlflow.db"]),
    (["compare", "--uri", "sqlite:///{tmp}/junk.db"], 2, ["cannot read the store", "point --uri at another store"]),
    (["compare", "--uri", "sqlite:///:memory:"], 2, ["keeps nothing after the run"]),
    (["compare", "--uri", "http://me:secret@127.0.0.1:9"], 2, ["holds a password", "MLFLOW_TRACKING_PASSWORD"]),
    (["compare", "--uri", S, "--experiment", "nope"], 2, ["no experiment 'nope'", "check --experiment"]),
    # selections
    (["compare", "--uri", S, "--baseline", "jax-jit"], 2, ["--baseline 'jax-jit' is no variant",
                                                          "'torch-eager fp32'"]),
    (["compare", "--uri", S, "batch_size=64,256"], 2, ["batch_size=64,256 matches no run", "one of 32, 128"]),
    (["compare", "--uri", S, "op=training"], 2, ["op=training matches no run", "op is one of inference"]),
    (["compare", "--uri", S, "bach_size=32"], 2, ["no run has a param or tag 'bach_size'",
                                                  "did you mean batch_size?"]),
    (["compare", "--uri", S, "model=lenett"], 2, ["did you mean model=lenet?"]),
    (["compare", "--uri", S, "torch_verison=2.12.0"], 2, ["did you mean torch_version"]),
    (["compare", "--uri", S, "lenet"], 2, ["'lenet' is not key=value", "model=lenet"]),
    (["compare", "--uri", S, "model="], 2, ["'model=' is not key=value"]),
    (["compare", "--uri", S, "model=lenet", "model=mlp"], 2, ["model is given twice", "model=lenet,mlp"]),
    (["compare", "--uri", S, "batch_size=32", "torch_version=2.99.0"], 2, ["torch_version=2.99.0 matches no run",
                                                                          "2.12.0, 2.13.0"]),
    (["compare", "--uri", S, "--sweep", "0123456789abcdef"], 2, ["no measured runs", "fix --sweep"]),
    (["compare", "--uri", S, "--filter", "bogus"], 2, ["fix --filter"]),
    (["compare", "--uri", S, "--profile"], 2, ["no profiled runs", "profile=true"]),
    (["compare", "--uri", S, "--sweep", "last", "--sweep", "last"], 2, ["the same sweep twice"]),
    (["compare", "--uri", S, "--sweep", "last", "--sweep", "0123456789abcdef"], 2, ["no measured runs",
                                                                                  "fix --sweep"]),
    (["compare", "--nosuch"], 2, ["unrecognized arguments: --nosuch", "nnbench compare --help"]),
    (["compare", "--uri", S, "--threshold", "5"], 2, ["--threshold 5 would be 500%: use 0.05 or 5%"]),
    # history: numbers, the axis
    (["history", "--by", "repeat", "--threshold", "5"], 2, ["--threshold 5 would be 500%: use 0.05 or 5%"]),
    (["history", "--by", "repeat", "--threshold", "abc"], 2, ["'abc' is not a number", "0.05 or 5%"]),
    (["history", "--by", "repeat", "--threshold", "150%"], 2, ["not a change between 0 and 100%"]),
    (["history", "--by", "repeat", "--fdr", "2"], 2, ["--fdr 2 is not between 0 and 1"]),
    (["history", "--by", "repeat", "--fdr", "nan"], 2, ["not a finite number"]),
    (["history", "--uri", S], 2, ["required: --by"]),
    (["history", "--uri", S, "--by", "nosuch_version"], 2, ["no tag or param 'nosuch_version'", "torch_version"]),
    (["history", "--uri", S, "--by", "torch_version", "--sweep", "last"], 2, ["one value of torch_version"]),
    (["history", "--uri", S, "--by", "torch_version", "--since", "9.9"], 2, ["--since 9.9 is not a value",
                                                                            "2.12.0, 2.13.0"]),
    (["history", "--uri", "http://127.0.0.1:9", "--by", "x"], 2, ["Connection refused"]),
    # check, export, upload, import, ui
    (["check", "--seconds", "-1"], 2, ["--seconds -1 must be at least 0.4", "--seconds 10"]),
    (["check", "--seconds", "ten"], 2, ["'ten' is not a number"]),
    (["check", "--seconds", "inf"], 2, ["not a finite number"]),
    (["export"], 2, ["required: --format"]),
    (["export", "--format", "csv"], 2, ["invalid choice: 'csv'"]),
    (["export", "--format", "timing", "--uri", S, "torch_version=2.13.0", "--out", "/proc/nnbench.txt"], 2,
     ["choose another --out"]),
    (["upload", "nodir"], 2, ["no directory nodir", "a sweep's or job's directory"]),
    (["upload", "{tmp}/empty"], 2, ["no point saved under", "a sweep's or job's directory"]),
    (["upload", "{tmp}/empty", "--uri", "./mlruns"], 2, ["no ./mlruns file store"]),
    (["import", "{tmp}/nofile.txt"], 2, ["cannot read", "nofile.txt", "a file of TIMING/METADATA lines"]),
    (["import", "{tmp}/lines.txt", "--framework-map", "JAX"], 2, ["'JAX' is not NAME=MODE", "JAX=jax-jit"]),
    (["import", "{tmp}/lines.txt", "--precision", "fp7"], 2, ["invalid choice: 'fp7'"]),
    (["ui", "--port", "0"], 2, ["--port 0 must be at least 1"]),
    (["ui", "--port", "70000"], 2, ["--port 70000 is past 65535"]),
    (["ui", "--uri", "sqlite:///{tmp}/none.db"], 2, ["no store at", "fix --uri"]),
    (["ui", "--uri", "http://127.0.0.1:9"], 2, ["Connection refused", "start the tracking server"]),
    # the commands that run sweeps: versions, bisect, calibrate, overhead, agree
    (["versions"], 2, ["no spec given", "jax==0.10.0,0.10.1"]),
    (["versions", "model=lenet"], 2, ["no spec given"]),
    (["versions", "jax==abc"], 2, ["'abc' in 'jax==abc' is not a version"]),
    (["versions", "jax==0.10.0,0.10.1", "--repeats", "0"], 2, ["--repeats 0 must be above 0"]),
    (["versions", "jax==0.10.0,0.10.1", "model=lenet", "runtime.python=/x"], 2, [
        "runtime.python is set by nnbench versions"]),
    (["versions", "jax==0.10.0,0.10.1", "model=lenet", "repeat=0,1"], 2, ["use --repeats"]),
    (["versions", "jax==0.10.0,0.10.1", "batchsize=3"], 2, ["unknown key 'batchsize'", "batch_size"]),
    (BUILDS, 2, ["did you mean lenet?"]),
    (["versions", "jax==0.10.0,0.10.1", "model=lenet", "--uri", "./mlruns"], 2, ["no ./mlruns file store"]),
    (["bisect", "jax", "0.10.0-0.10.2"], 2, ["range '0.10.0-0.10.2' is not A..B", "0.10.0..0.10.2"]),
    (["bisect", "jax", "0.10.2..0.10.0"], 2, ["runs backwards: use 0.10.0..0.10.2"]),
    (["bisect", "jax", "a..b"], 2, ["is not A..B of versions"]),
    (["bisect", "jax", "0.10.0..0.10.2", "--threshold", "5"], 2, ["would be 500%"]),
    (["bisect", "jax", "0.10.0..0.10.2", "--alpha", "1.5"], 2, ["--alpha 1.5 is not between 0 and 1"]),
    (["bisect", "jax"], 2, ["required: A..B"]),
    (["bisect", "jax", "0.10.0..0.10.2", "--issue", "{tmp}/mlruns/mlflow.db"], 2, ["is a file: name a folder"]),
    (["ab", "framework=jax,torch", "--markdown", "{tmp}"], 2, ["--markdown", "is a folder: name a file"]),
    (["versions", "jax==0.10.0,0.10.1", "--markdown", "{tmp}/mlruns/mlflow.db/x.md"], 2,
     ["mlflow.db is not a folder this user can write into"]),
    (["versions", "jax==0.10.0,0.10.1", "--markdown", "/proc/x.md"], 2,  # writable by its mode bits, even for root
     ["/proc is not a folder this user can write into"]),
    (["overhead", "bogus=1"], 2, ["unknown key 'bogus'"]),
    (["overhead", "model=nosuch"], 2, ["unknown model 'nosuch'"]),
    (["overhead", "--readme", "model=lenet"], 2, ["give one of them"]),
    (["overhead", "--sweep"], 2, ["unrecognized arguments: --sweep"]),
    (["overhead", "framework=torch", "framework.compile=false", "framework.compile_mode=reduce-overhead"], 2, [
        "reduce-overhead", "framework.compile=true"]),
    (["overhead", "framework=torch", "batch_size=-3"], 2, ["batch_size must be a positive integer"]),
    (["calibrate", "--repeats", "1"], 2, ["--repeats 1 must be at least 2"]),
    (["calibrate", "--sweep", "last", "model=lenet"], 2, ["give one of them"]),
    (["calibrate", "--sweep", "last", "--uri", "sqlite:///{tmp}/none.db"], 2, ["no store at", "fix --uri"]),
    (["calibrate", "bogus=1"], 2, ["unknown key 'bogus'"]),
    (["agree", "--repeats", "0"], 2, ["--repeats 0 must be above 0"]),
    (["agree", "--window", "-1"], 2, ["--window -1 must be above 0"]),
    (["agree", "--models", "nosuch"], 2, ["invalid choice: 'nosuch'"]),
    (["agree", "--rounds", "3"], 2, ["unrecognized arguments: --rounds"]),
]


@pytest.mark.parametrize("argv,code,words", [pytest.param(*c, marks=[pytest.mark.slow] if c[0] == BUILDS else [],
                                                          id=" ".join(c[0])[:60]) for c in BAD])
def test_bad_input_is_one_line_naming_the_fix(store, capsys, argv, code, words, monkeypatch, tmp_path_factory):
    tmp, uri, _ = store
    monkeypatch.setenv("NNBENCH_ENV_CACHE", str(run_cache(tmp_path_factory, "jax-envs")))
    argv = [a.replace(S, uri).replace("{tmp}", str(tmp)) for a in argv]
    got, err, _ = call(argv, capsys)
    assert got == code and len(err) == 1, (got, err)
    command = next((a for a in argv if not a.startswith("-")), None)
    assert err[0].startswith(f"nnbench {command}: error: " if command and command in argv[:1] and
                             not command.startswith(("comapre", "histroy", "frobnicate")) else "nnbench"), err
    for w in words:
        assert w in err[0], err[0]
    assert "or pass --uri" not in err[0] or "--uri" not in argv


def test_two_sweeps_are_judged_point_by_point(store, capsys):
    """The second sweep is 30% slower at both points: each is a regression, and --fail-on-regression exits 1."""
    _, uri, (first, _) = store
    code, err, out = call(["compare", "--uri", uri, "--sweep", first, "--sweep", "last", "--fail-on-regression"],
                          capsys)
    assert code == 1 and not err, err
    assert out.startswith(f"sweep 1 = {first}, sweep 2 = ") and "2 changes (2 slower, 0 faster) in 2 points" in out
    code, _, out = call(["compare", "--uri", uri, "--sweep", first, "--sweep", "last", "--json"], capsys)
    changes = json.loads(out)
    assert code == 0 and sorted(c["batch_size"] for c in changes) == [32, 128]
    assert all(c["verdict"] == "slower" and 1.2 < c["ratio"] < 1.4 and c["before"] == first for c in changes)


def test_json_is_the_only_stdout(store, capsys):
    _, uri, _ = store
    code, _, out = call(["compare", "--uri", uri, "--json", "torch_version=2.13.0"], capsys)
    rows = json.loads(out)
    assert code == 0 and [r["batch_size"] for r in rows] == [32, 128] and all(r["variant"] == "torch-eager fp32"
                                                                             for r in rows)
    code, err, out = call(["history", "--uri", uri, "--by", "torch_version", "--json"], capsys)
    got = json.loads(out)
    assert code == 0 and got["values"] == ["2.12.0", "2.13.0"] and len(got["points"]) == 4
    assert {c["where"] for c in got["changes"]} == {"2.13.0"} and "logged as run" in err[-1]
    code, _, out = call(["check", "--seconds", "0.4", "--json"], capsys)
    assert code in (0, 1) and {"window_sd", "other_cores", "noisy", "line"} <= set(json.loads(out))


def test_a_launcher_without_its_plugin_names_the_install():
    """`-m hydra/launcher=slurm` where hydra-submitit-launcher is missing: its options are none (Hydra's list)."""
    line = hydra_errors.missing_option("hydra/launcher/submitit_slurm", [])
    assert "needs its Hydra plugin" in line and "pip install -e '.[launchers]'" in line and "(choose )" not in line


def test_version(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0 and capsys.readouterr().out.startswith("nnbench ")


MINIMAL = {"compare": [], "export": ["--format", "timing"], "import": ["f.txt"], "ui": [], "upload": ["d"],
           "history": ["--by", "x"], "versions": [], "bisect": ["jax", "0.1..0.2"], "ab": ["framework=jax,torch"],
           "sciml": [], "check": [], "agree": [], "calibrate": [], "overhead": [], "devicecheck": [], "gpucheck": []}


@pytest.mark.parametrize("command", sorted(MINIMAL))
def test_ctrl_c_anywhere_in_a_command_is_one_line_and_130(command, capsys, monkeypatch):
    """Wherever a Ctrl-C lands in a command (here: as it starts), main() makes it one line and exit 130."""
    from experiments.cli import COMMANDS

    def interrupt(_):
        raise KeyboardInterrupt

    monkeypatch.setattr(f"{COMMANDS[command][0]}.run", interrupt)
    code, err, _ = call([command, *MINIMAL[command]], capsys)
    assert code == 130 and err == [f"nnbench {command}: error: interrupted (Ctrl-C): what was finished is kept"]


@pytest.mark.parametrize("argv,after_s", [
    (["check", "--seconds", "60"], 4),  # in the command's own loop
    # in the sweep it runs as a child: stopped the sweep's way, its output kept from the terminal
    (["overhead", "framework=torch", "model=lenet", "bench=quick", "batch_size=8", "ops=[inference]"], 8),
])
@pytest.mark.slow
def test_ctrl_c_is_one_line_and_exit_130(argv, after_s):
    code, err, _ = interrupted(argv, after_s)
    assert code == 130 and len(err) == 1, (code, err)
    assert err[0].startswith(f"nnbench {argv[0]}: error: interrupted") and "Traceback" not in err[0]

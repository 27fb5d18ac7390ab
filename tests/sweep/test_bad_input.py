"""Every bad input a new user is likely to type is rejected in one line, before anything is written or measured.

Each case runs `experiments.run` as `python -m` does (runpy, as `__main__`, its arguments in sys.argv) in a fresh
folder and a fresh process: one process imports the entry point's modules once (a second of CPU that every case
would otherwise pay again) and forks a process per case, four at a time.
"""
import json
import os
import stat
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Callable

import pytest

from experiments.common.devices import present
from experiments.sweep.hydra_errors import options
from tests.helpers import free_port, gpu_visible, tree, user_env

FRAMEWORKS = f"(choose {', '.join(options('framework'))})"


@dataclass(frozen=True)
class Case:
    id: str
    args: tuple[str, ...]  # after `-m bench=quick` (a sweep) or `bench=quick` (single=True)
    expect: str  # part of the one line
    single: bool = False
    setup: Callable[[Path], None] = field(default=lambda cwd: None)


def junk_store(cwd: Path) -> None:
    (cwd / "mlruns").mkdir()
    (cwd / "mlruns" / "mlflow.db").write_bytes(b"not a database" * 100)


def taken_dir(cwd: Path) -> None:
    (cwd / "taken").mkdir()
    (cwd / "taken" / "nnbench-sweep.json").write_text("{}")


def not_executable(cwd: Path) -> None:
    (cwd / "python").write_text("#!/bin/sh\n")
    os.chmod(cwd / "python", stat.S_IRUSR | stat.S_IWUSR)


CASES = [
    Case("framework-tf", ("framework=tf",), f"unknown framework 'tf' {FRAMEWORKS}"),
    Case("framework-tf-single", ("framework=tf",), f"unknown framework 'tf' {FRAMEWORKS}", single=True),
    Case("framework-empty", ("framework=",), f"framework needs a value {FRAMEWORKS}"),
    Case("framework-deleted", ("~framework",), f"framework needs a value {FRAMEWORKS}"),
    Case("model-nope", ("model=nope",), "unknown model 'nope' (choose dscnn, file, gpt_tiny, lenet, lstm, matmul_chain"),
    Case("batchsize", ("batchsize=32",), "unknown key 'batchsize': did you mean batch_size?"),
    Case("plus-batchsize", ("+batchsize=32",), "unknown key 'batchsize': did you mean batch_size?"),
    Case("batch-abc", ("batch_size=abc",), "batch_size must be an integer (got 'abc'): use e.g. batch_size=32"),
    Case("batch-float", ("batch_size=1.5",), "batch_size must be an integer (got '1.5')"),
    Case("batch-list", ("batch_size=[1,2]",), "batch_size must be an integer"),
    Case("batch-zero-single", ("batch_size=0",), "batch_size must be a positive integer (got 0)", single=True),
    Case("batch-negative-in-sweep", ("framework=torch", "batch_size=32,-1"), "positive integer (got -1)"),
    Case("ops-foo", ("ops=[foo]",), "ops holds unknown op (got 'foo'): use e.g. ops=[inference,training]"),
    Case("ops-not-list", ("ops=inference",), "ops must be a list: use e.g. ops=[inference,training]"),
    Case("ops-empty", ("ops=[]",), "ops is empty"),
    Case("precision-fp8", ("precision=fp8",), "unknown precision 'fp8' (choose bf16, fp16, fp32, fp64)"),
    Case("tf32-maybe", ("precision.tf32=maybe",), "precision.tf32 must be true or false (got 'maybe')"),
    Case("device-tpu", ("device=tpu",), "device=tpu: jax sees no TPU ("),
    Case("device-tpu-torch", ("framework=torch", "device=tpu"), "device=tpu: torch has no TPU backend: use"),
    Case("device-npu", ("device=npu",), "device must be one of auto, cpu, gpu, tpu (got 'npu')"),
    Case("bench-nonexistent", ("bench=nonexistent",), "unknown bench 'nonexistent' (choose default, quick"),
    Case("seed-abc", ("seed=abc",), "seed must be an integer (got 'abc')"),
    Case("seed-negative", ("seed=-1",), "seed must be in [0, 2**32) (got -1)"),
    Case("repeat-negative", ("repeat=-1",), "repeat is a replicate index (got -1)"),
    Case("compile-maybe", ("framework.compile=maybe",), "framework.compile must be true or false (got 'maybe')"),
    Case("profile-maybe", ("profile=maybe",), "profile must be true or false (got 'maybe')"),
    Case("profile-typo", ("profiel=true",), "unknown key 'profiel': did you mean profile?"),
    Case("compile-typo", ("framework.compiled=true",), "unknown key 'framework.compiled': did you mean "
                                                       "framework.compile?"),
    Case("double-comma", ("framework=jax,,torch",), "cannot parse 'framework=jax,,torch'"),
    Case("sweep-without-m", ("framework=jax,torch",), "sweeps several values: add -m", single=True),
    Case("matmul-n-negative", ("model=matmul_chain", "model.n=-5"), "model.n must be a positive integer (got -5)"),
    Case("matmul-n-abc", ("model=matmul_chain", "model.n=abc"), "model.n must be a positive integer (got 'abc')"),
    Case("matmul-unknown-key", ("model=matmul_chain", "+model.widht=3"), "has no key widht"),
    Case("lenet-has-no-n", ("model.n=5",), "this model has no key 'n' (its keys: none)"),
    Case("timeout-negative", ("bench.timeout_s=-1",), "bench.timeout_s must be positive"),
    Case("target-ci-1.5", ("bench.target_rel_ci=1.5",), "bench.target_rel_ci must be between 0 and 1"),
    Case("max-time-zero", ("bench.max_time_s=0",), "bench.max_time_s must be positive"),
    Case("max-below-min", ("bench.max_samples=2",), "bench.max_samples (2) is below bench.min_samples (6)"),
    Case("bench-key-typo", ("bench.max_tme=1",), "unknown key 'bench.max_tme': did you mean bench.max_time_s?"),
    Case("experiment-nonexistent", ("experiment=nonexistent",), "unknown experiment 'nonexistent' (choose "
                                                                 "modern, seed000, seed004)"),
    Case("experiment-typo", ("experiment=seed00",), "unknown experiment 'seed00' (did you mean seed00"),
    Case("python-dir", ("runtime.python=/tmp",), "runtime.python=/tmp is not an executable interpreter"),
    Case("python-dir-single", ("runtime.python=/tmp",), "is not an executable interpreter", single=True),
    Case("python-missing", ("runtime.python=/nonexistent/python",), "is not an executable interpreter"),
    Case("python-not-executable", ("runtime.python=python",), "is not an executable interpreter",
         setup=not_executable),
    Case("python-cannot-measure", ("runtime.python=/bin/sh",), "runtime.python=/bin/sh cannot measure "
                                                               "framework=jax"),
    Case("store-in-proc", ("mlflow.tracking_uri=sqlite:////proc/nope.db",), "cannot write the store "
                                                                              "sqlite:////proc/nope.db"),
    Case("store-in-proc-single", ("mlflow.tracking_uri=sqlite:////proc/nope.db",), "cannot write the store",
         single=True),
    Case("store-is-dir", ("mlflow.tracking_uri=sqlite:////tmp",), "sqlite:////tmp is a directory"),
    Case("store-junk", (), "file is not a database", setup=junk_store),
    Case("store-file-store", ("mlflow.tracking_uri=./mlruns",), "unsupported store './mlruns'"),
    Case("store-server-down", ("mlflow.tracking_uri=http://127.0.0.1:PORT",), "start the tracking server"),
    Case("store-swept", ("mlflow.tracking_uri=sqlite:///a.db,sqlite:///b.db",), "a sweep logs to one store"),
    Case("experiment-name-empty", ("mlflow.experiment_name=''",), "mlflow.experiment_name is empty"),
    Case("mlflow-not-a-value", ("mlflow=3",), "mlflow is a group of keys"),
    Case("baseline-foo", ("report.baseline=foo",), "report.baseline must be '<mode> <precision>'"),
    Case("sweep-dir-taken", ("hydra.sweep.dir=taken",), "taken already holds another sweep", setup=taken_dir),
    Case("launcher-nope", ("hydra/launcher=nope",), "unknown hydra/launcher 'nope' (choose basic"),
    Case("max-batch-abc", ("hydra.sweeper.max_batch_size=abc",), "hydra.sweeper.max_batch_size must be an integer"),
    Case("unknown-flag", ("--foo",), "unrecognized arguments: --foo"),
    Case("config-name", ("--config-name=nope",), "no primary config 'nope'"),
    Case("two-commands", ("--cfg", "job"), "give one of --run, --multirun (-m), --cfg"),
    Case("resolve-alone", ("--resolve",), "--resolve goes with --cfg or --help", single=True),
    Case("gpu-without-gpu", ("framework=torch", "device=gpu"), "sees no GPU"),
    Case("external-without-runner", ("framework=external",), "framework=external needs external.name=NAME"),
    Case("allocator-foo", ("runtime.allocator=foo",), "runtime.allocator must be one of glibc, system"),
    Case("processes-zero", ("bench.processes=0",), "bench.processes must be at least 1"),
    Case("rounds-zero", ("bench.rounds=0",), "bench.rounds must be at least 1"),
    Case("burst-zero", ("bench.burst_s=0",), "bench.burst_s must be positive"),
    Case("along-not-a-variant", ("report.along=model",), "report.along=model is not a key a cell's variants span"),
    Case("threshold-one", ("report.threshold=1",), "report.threshold=1.0 is not a fraction in [0, 1)"),
    Case("memory-format-nchw", ("framework.memory_format=nchw",), "framework.memory_format must be one of"),
]


# Reads [{cwd, args, out, err}] on stdin, prints each command's exit code. A child is `python -m experiments.run ARGS`
# run from `cwd` but for the imports its parent did: sys.path[0] is '' (the cwd), as with -m.
FORKED = """
import json, os, runpy, sys
import experiments.run  # its modules, imported once for every case; runpy runs it afresh as __main__ in each child
del sys.modules["experiments.run"], sys.modules["experiments"].run  # as before `python -m`: not imported yet
commands, codes, running = json.load(sys.stdin), {}, {}
for i, c in enumerate(commands):
    if len(running) == 4:
        pid, status = os.wait()
        codes[running.pop(pid)] = os.waitstatus_to_exitcode(status)
    pid = os.fork()
    if pid == 0:
        os.chdir(c["cwd"])
        for fd, path in ((1, c["out"]), (2, c["err"])):
            os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), fd)
        sys.argv = ["-m", *c["args"]]  # runpy sets argv[0] to the module's file
        runpy.run_module("experiments.run", run_name="__main__", alter_sys=True)
        sys.exit(0)
    running[pid] = i
while running:
    pid, status = os.wait()
    codes[running.pop(pid)] = os.waitstatus_to_exitcode(status)
print(json.dumps([codes[i] for i in range(len(commands))]))
"""


@pytest.fixture(scope="module")
def outcomes(request, tmp_path_factory):
    """Run the selected cases at once: {case id: (folder listing before, after, completed process)}."""
    wanted = [item.callspec.params["case"] for item in request.session.items
              if item.originalname == "test_bad_input_is_rejected_in_one_line"]
    port = free_port()  # nothing listens there

    folders = [tmp_path_factory.mktemp(case.id) for case in wanted]
    outputs = tmp_path_factory.mktemp("outputs")  # each case's stdout and stderr, outside its folder
    befores, commands = [], []
    for i, (case, cwd) in enumerate(zip(wanted, folders)):
        case.setup(cwd)
        befores.append(tree(cwd))
        args = [*([] if case.single else ["-m"]), "bench=quick", *(a.replace("PORT", str(port)) for a in case.args)]
        commands.append({"cwd": str(cwd), "args": args, "out": str(outputs / f"{i}.out"),
                         "err": str(outputs / f"{i}.err")})
    r = subprocess.run([sys.executable, "-c", FORKED], input=json.dumps(commands), env=user_env(), capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    codes = json.loads(r.stdout)
    return {case.id: (before, SimpleNamespace(returncode=code, stdout=Path(c["out"]).read_text(),
                                              stderr=Path(c["err"]).read_text()), cwd)
            for case, before, c, code, cwd in zip(wanted, befores, commands, codes, folders)}


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_is_rejected_in_one_line(outcomes, case):
    if case.id == "gpu-without-gpu" and gpu_visible("torch"):
        pytest.skip("a GPU is visible")
    if case.id == "device-tpu" and present().tpus:
        pytest.skip("a TPU is on the bus")
    before, r, cwd = outcomes[case.id]
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2, r.stderr
    assert len(lines) == 1 and lines[0].startswith("nnbench: error: "), r.stderr
    assert case.expect in lines[0]
    assert "Traceback" not in r.stdout + r.stderr and r.stdout == ""
    assert tree(cwd) == before  # no mlruns/, no multirun/ or outputs/, no state file, no run


def test_the_catalogue_is_large_enough():
    assert len(CASES) >= 35 and len({c.id for c in CASES}) == len(CASES)

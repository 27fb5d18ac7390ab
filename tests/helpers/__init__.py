"""What several test modules share: tiny models, the real config typed, synthetic results, the CLI in a subprocess,
a real MLflow server."""
from __future__ import annotations

import functools
import json
import os
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import models
from experiments.common.config import Config, bench_budget, register
from experiments.common.protocol import Budget
from tests import forked
from tests.forked import ROOT
from tests.synthetic import ok_op  # noqa: F401 (the tests take it from here)

# Sizes a test can afford; the transformers keep width 64, where XLA's elementwise count (exact GELU's erf
# polynomial, the softmax) stays within 20% of the matmuls' (tests/measure/test_flops.py).
TINY = {"matmul_chain": {"n": 16, "m": 4, "depth": 3},
        "gpt_tiny": {"vocab": 64, "length": 16, "width": 64, "depth": 1, "heads": 2},
        "vit_tiny": {"depth": 1, "width": 64, "heads": 2, "patch": 8},
        "unet_small": {"size": 8, "width": 8, "groups": 4},
        "lstm": {"vocab": 50, "length": 6, "embed": 16, "hidden": 32},
        "dscnn": {"channels": 16}}
# The seed's models, and those beyond them (experiment=modern): tests that compile every op of every model run the
# modern ones on fewer ops, to keep the suite's time.
SEEDS = ("lenet", "matmul_chain", "mlp_batchnorm", "mlp_gelu", "mlp_relu", "resnet")
# The models whose every op tests/measure/test_backends.py runs through torch.compile, counting its graphs (a graph
# takes 5-20 s to compile here: no other test compiles these again)
TORCH_COMPILED = ("mlp_relu", "lenet")
FORMAT = {"jax": "nhwc", "torch": "contiguous"}  # each framework's default framework.memory_format
# bench=quick cut further, for a sweep whose test asserts what the sweep does (its runs, statuses, lines), not what
# it measured: a few samples per op, no warm-up time, no check of the machine's noise.
BRIEF = ("bench=quick", "bench.max_time_s=0.05", "bench.min_samples=3", "bench.warmup_s=0",
         "bench.machine_check_s=0")


def tiny(name: str) -> models.ModelSpec:
    """The model at sizes a test can afford."""
    return models.load(name, **TINY.get(name, {}))


def config(*overrides: str) -> Config:
    """The real config composed with `overrides` and typed at the door, as a sweep's job gets it."""
    from hydra import compose, initialize_config_dir

    from experiments.sweep.preflight import typed

    register()
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        return typed(compose(config_name="config", overrides=list(overrides)))


def budget(bench: str = "default", **overrides) -> Budget:
    """A bench config's budget, as the config group sets it, with `overrides`."""
    return replace(bench_budget(bench), **overrides)


def gpu_visible(fw: str) -> bool:
    if fw == "torch":
        import torch
        return torch.cuda.is_available()
    import jax
    try:
        return bool(jax.devices("gpu"))
    except RuntimeError:
        return False


# Variables the libraries a test process runs set in its environment as they run, which a command's own libraries
# set alike: jax's at import, mlflow's (its telemetry session, GitPython's quiet refresh), torch's compiler's cache
# dir (a probe compiles nothing; a sweep gives its workers their own).
LIBRARIES_SET = ("TF_CPP_MIN_LOG_LEVEL", "TPU_SKIP_MDS_QUERY", "_MLFLOW_", "GIT_PYTHON_REFRESH",
                 "TORCHINDUCTOR_CACHE_DIR")
# Variables a test sets for a command that don't change what a probe of this interpreter answers: the stand-in
# worker's, the store's, the installers' and CI's, and pytest's own (PYTEST_CURRENT_TEST: set in every test).
UNPROBED = ("FAKE_", "MLFLOW_", "NNBENCH_", "UV_", "PIP_", "GITHUB_", "PATH", "HOME", "PYTHONPATH", "PYTEST_",
            *LIBRARIES_SET)


def user_env(**extra: str) -> dict[str, str]:
    """This environment as a user's shell would have it: no store configured, the suite importable; where it differs
    from the session's only in UNPROBED, with what a door found probing this interpreter (`door_found`)."""
    from experiments.sweep import preflight  # not at import: the stand-in worker imports this module, many times

    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"} | {"PYTHONPATH": str(ROOT)} | extra
    changed = {k for k in env.keys() | forked.ENVIRON.keys() if env.get(k) != forked.ENVIRON.get(k)}
    if all(k.startswith(UNPROBED) for k in changed):
        env.setdefault(preflight.FOUND, door_found())
    return env


@functools.cache
def door_found() -> str:
    """What the door of a sweep of each framework at the config's defaults finds probing this interpreter, asked
    once per test process by the door's own code, as `preflight.FOUND`: the commands the suite starts get it, as the
    sweep of `nnbench ab` gets its command's, and their doors don't import each framework again to ask. A door
    that asks anything else (another interpreter, precision, device, allocator, ...) still probes."""
    from hydra import compose, initialize_config_dir  # the door's own config and probe: once per test process

    from experiments.harness import manager
    from experiments.sweep import preflight

    register()
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        asks = [preflight.ask(preflight.job(preflight.typed(compose("config", [f"framework={fw}"]))))
                for fw in ("jax", "torch")]
    with forked.session_environ():  # every later test reads the answers
        answers = manager.probe(asks)
    probes = {preflight.asked(a): [fingerprint, device] for a, (problem, fingerprint, device) in zip(asks, answers)
              if problem is None}
    return json.dumps({"probes": probes, "networks": {}})


def run(args: list[str], cwd: Path, module: str = "experiments.run", fresh: bool = False,
        **extra_env: str) -> subprocess.CompletedProcess:
    """`python -m experiments.run ARGS` (or another module) as a user runs it in `cwd` (./mlruns: the default store);
    a sweep skips its parity process (seconds of importing both frameworks) unless `parity=` is given (not added
    beside Hydra's own flags, --cfg, --resolve, --config-name, which take no override after them).

    The command runs in a process forked from one that imported its modules already (`forked`), or in a fresh
    interpreter where `fresh` is set or its environment changes what Python reads as it starts."""
    if module == "experiments.run":
        args = unchecked(args)
    env = user_env(**extra_env)
    if not fresh and forked.starts_alike(env):
        return forked.run(module, args, cwd, env, timeout=600)
    return subprocess.run([sys.executable, "-m", module, *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=600)


def run_at_once(argss: list[list[str]], cwd: Path, **extra_env: str) -> list[subprocess.CompletedProcess]:
    """`run(args, cwd)` for each of `argss`, all started at once (a thread each), as commands typed in several
    terminals. What this process sets up for its first command (the door's answers, the fork server) is done first,
    here: it swaps this process's environment for a moment, which no thread may read meanwhile."""
    if forked.starts_alike(user_env(**extra_env)):
        forked.context()
    with ThreadPoolExecutor(len(argss)) as pool:
        return list(pool.map(lambda args: run(args, cwd, **extra_env), argss))


def unchecked(args: list[str]) -> list[str]:
    """A sweep's arguments with `parity=false` added unless `parity=` is given or Hydra's own flags are, which take no
    override after them (--cfg, --resolve, --config-name)."""
    return args if any(a.startswith(("parity=", "--")) for a in args) else [*args, "parity=false"]


def nnbench(command: str, args: list[str], cwd: Path, **extra_env: str) -> subprocess.CompletedProcess:
    """`nnbench COMMAND ARGS` (as `python -m experiments`) as a user runs it in `cwd`."""
    return run([command, *args], cwd, module="experiments", **extra_env)


def forget(uri: str) -> None:
    """Drop this process's MLflow store of `uri` (MLflow keeps one per URI, and an engine per database, with its open
    connections): a database deleted and made again under the same URI is read afresh."""
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore
    from mlflow.tracking._tracking_service.registry import TrackingStoreRegistry

    TrackingStoreRegistry._get_store_with_resolved_uri.cache_clear()
    if engine := SqlAlchemyStore._engine_map.pop(uri, None):
        engine.dispose()


def runs(uri: str, parents: bool = False):
    """The point runs (or only the sweeps' parent runs) of the nnbench experiment."""
    import mlflow
    import pandas as pd

    mlflow.set_tracking_uri(uri)
    df = mlflow.search_runs(experiment_names=["nnbench"])
    is_parent = df.get("tags.nnbench.sweep", pd.Series("", index=df.index)).eq("true")
    return df[is_parent] if parents else df[~is_parent]


@functools.cache
def _empty_store() -> Path:
    """An SQLite store with MLflow's tables made and no run, made once per process."""
    from mlflow.tracking import MlflowClient

    path = Path(tempfile.mkdtemp(prefix="nnbench-empty-store-")) / "mlflow.db"
    MlflowClient(f"sqlite:///{path}").search_experiments()  # creates and migrates the tables
    return path


def with_store(cwd: Path, name: str = "mlruns/mlflow.db") -> Path:
    """`cwd` holding an empty store at `name` (default: the default store), as after a user's first command: a
    store's migrations take seconds in every new one. Tests of a store's creation start without one."""
    (cwd / name).parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(_empty_store(), cwd / name)
    return cwd


# An older jax release that `nnbench versions` builds an environment of beside this one's: the tests that build the
# two share them for the run (`run_cache(tmp_path_factory, "jax-envs")`).
OLD_JAX = "0.10.1"


def run_cache(tmp_path_factory, name: str) -> Path:
    """A folder that every pytest-xdist worker of this run shares (their basetemps lie in the run's), for what the
    product caches across processes under its own locks (measuring environments): built once a run, not once a
    worker, and fresh in each run."""
    base = tmp_path_factory.getbasetemp()
    return (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / name


def tree(root: Path) -> dict[str, tuple[int, int]]:
    """Every file and folder under root, with its size and modification time: what a command left behind."""
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*")}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve(store: str, port: int, artifacts: Path | None = None) -> subprocess.Popen:
    """A real `mlflow server` on 127.0.0.1 (stop it with os.killpg(server.pid, 15))."""
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false", "MLFLOW_DISABLE_TELEMETRY": "true"}
    extra = ["--artifacts-destination", str(artifacts)] if artifacts else []
    server = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
         "--backend-store-uri", store, *extra],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    for _ in range(120):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return server
        except OSError:
            time.sleep(0.5)
    raise RuntimeError("mlflow server did not start")


def fake_interpreter(directory: Path, **env: str) -> str:
    """An executable in `directory` that stands in for a venv's python and runs tests/helpers/fake_worker.py, with
    `env` set (an environment of its own: FAKE_SLOWER)."""
    path = directory / "fake-python"
    exports = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in env.items())
    path.write_text(f'#!/bin/sh\n{exports}exec {sys.executable} {ROOT / "tests" / "helpers" / "fake_worker.py"} "$@"\n')
    path.chmod(0o755)
    return str(path)


def unavailable(what: str, why: str):
    """Skip a test whose real part (a SLURM cluster, a database server) is missing; fail instead where CI asked for
    it (NNBENCH_REQUIRE_CLUSTER=1), so a missing cluster can't pass as a skip."""
    import pytest

    if os.environ.get("NNBENCH_REQUIRE_CLUSTER") == "1":
        pytest.fail(f"{what} is required here (NNBENCH_REQUIRE_CLUSTER=1) but {why}")
    pytest.skip(f"{what}: {why}")

"""`python -m MODULE ARGS` for the suite's commands, in a process forked from one that imported the parent's modules
already: a fresh interpreter spends 2-3 s of CPU importing Hydra, MLflow, pandas and matplotlib before a command
starts, and the suite runs a few hundred commands.

The child is a real process of its own: its working directory, environment, arguments, stdout and stderr are the
command's; it runs the module as `__main__` (runpy, as `python -m` does), then what a Python process runs as it exits
(its non-daemon threads joined, atexit), and its exit code or signal is the command's. Only the imports are shared,
by multiprocessing's fork server (one per test process, started at its first command), which imports nothing else
and starts no thread, so a fork copies no lock held by another thread. `tests/helpers.run` runs a fresh
interpreter instead where the command's environment changes what Python itself reads at start (`starts_alike`).
"""
from __future__ import annotations

import atexit
import functools
import multiprocessing
import os
import runpy
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

# What a sweep's parent and the nnbench commands import between them; the workers' frameworks stay out.
PRELOAD = ["experiments.run", "experiments.cli", "experiments.store.tracking", "experiments.store.parent",
           "experiments.report.plots", "mlflow", "pandas", "scipy.stats", "matplotlib.pyplot"]

@functools.cache
def context():
    """multiprocessing's fork-server context, preloading PRELOAD (its server starts with the first command)."""
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(PRELOAD)
    return ctx


def starts_alike(env: dict[str, str]) -> bool:
    """Whether a fresh interpreter with `env` would start as this one did: the same PYTHON* variables (PYTHONPATH
    may add the suite, which this process imports already), so a forked child can stand in for it."""
    root = str(Path(__file__).resolve().parents[2])
    return all(env.get(k) == os.environ.get(k) for k in {*env, *os.environ}
               if k.startswith("PYTHON") and k not in ("PYTHON", "PYTHONPATH")) \
        and env.get("PYTHONPATH") in (root, os.environ.get("PYTHONPATH"))


def command(module: str, args: list[str], cwd: str, env: dict[str, str], out: str, err: str) -> None:
    """In the forked child: become `python -m MODULE ARGS` in `cwd` with `env`, its output to `out` and `err`."""
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    for fd, path in ((1, out), (2, err)):
        os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), fd)
    sys.path[0:0] = [cwd]  # as `python -m` puts the working directory first
    package, _, leaf = module.rpartition(".")
    sys.modules.pop(module, None)  # as before `python -m`: the module itself not imported yet
    if package and hasattr(sys.modules.get(package), leaf):
        delattr(sys.modules[package], leaf)
    sys.argv = ["-m", *args]  # runpy sets argv[0] to the module's file
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    finally:  # what the interpreter does at exit, in its order; multiprocessing skips atexit
        threading._shutdown()
        atexit._run_exitfuncs()


def run(module: str, args: list[str], cwd: Path, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess:
    """The command's exit code, stdout and stderr, as subprocess.run(..., capture_output=True, text=True) gives them;
    subprocess.TimeoutExpired once it runs past `timeout` seconds (it is killed)."""
    with tempfile.TemporaryDirectory(prefix="nnbench-forked-") as d:
        out, err = os.path.join(d, "out"), os.path.join(d, "err")
        p = context().Process(target=command, args=(module, args, str(cwd), env, out, err))
        p.start()
        p.join(timeout)
        if p.exitcode is None:
            p.kill()
            p.join()
            raise subprocess.TimeoutExpired([sys.executable, "-m", module, *args], timeout)
        out, err = (Path(f).read_text(errors="replace") if Path(f).exists() else "" for f in (out, err))
        return subprocess.CompletedProcess([sys.executable, "-m", module, *args], p.exitcode, out, err)

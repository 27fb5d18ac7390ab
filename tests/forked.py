"""`python -m MODULE ARGS` for the suite's commands, in a process forked from one that imported their libraries
already: a fresh interpreter spends 2-3 s of CPU importing Hydra, MLflow, pandas and matplotlib before a command
starts, and the suite runs a few hundred commands.

The child is a real process of its own: its working directory, environment, arguments, stdout and stderr are the
command's; it runs the module as `__main__` (runpy, as `python -m` does), then what a Python process runs as it exits
(its non-daemon threads joined, atexit), and its exit code or signal is the command's. Only third-party imports are
shared, by multiprocessing's fork server (one per test process, started at its first command with the environment
the session started with), which starts no thread, so a fork copies no lock held by another thread. The child
imports nnbench's own modules itself (they draw values at import, such as the sweep directories' unique tag), from
the path a fresh interpreter searches: a test may have added an environment's site-packages to this process's.
`tests.helpers.run` runs a fresh interpreter instead where the command's environment changes what Python itself
reads at start (`starts_alike`). This module imports nothing of the suite's: the child imports it to run `command`.
"""
from __future__ import annotations

import atexit
import contextlib
import functools
import multiprocessing
import multiprocessing.forkserver
import os
import runpy
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

# The libraries a sweep's parent and the nnbench commands import between them; the workers' frameworks stay out.
PRELOAD = ["mlflow", "mlflow.tracking", "mlflow.store.db.utils", "hydra.main", "hydra._internal.utils",
           "hydra._internal.core_plugins.basic_sweeper", "hydra.core.config_store", "omegaconf", "pandas",
           "scipy.stats", "matplotlib.pyplot", "matplotlib.backends.backend_agg", "psutil"]
ENVIRON = dict(os.environ)  # as the session started, before any test changed it
ROOT = Path(__file__).resolve().parents[1]


@functools.cache
def context():
    """multiprocessing's fork-server context, its server started now, preloading PRELOAD, with the session's starting
    environment and a fresh interpreter's path."""
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(PRELOAD)
    path = sys.path[:]
    try:
        sys.path[:] = [str(ROOT), *site_path()]  # the child imports this module from ROOT
        with session_environ():
            multiprocessing.forkserver.ensure_running()
    finally:
        sys.path[:] = path
    return ctx


@contextlib.contextmanager
def session_environ():
    """This process's environment as the session started, until the block ends: for what is started or asked once
    and kept for every later test, whatever the test that asks first has set."""
    environ = dict(os.environ)
    os.environ.clear()
    os.environ.update(ENVIRON)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(environ)


@functools.cache
def site_path() -> list[str]:
    """The path a fresh interpreter searches after its script's directory and PYTHONPATH: the standard library and
    site-packages."""
    env = {k: v for k, v in ENVIRON.items() if k != "PYTHONPATH"}
    out = subprocess.run([sys.executable, "-c", "import sys; print(*sys.path[1:], sep=chr(10))"], env=env,
                         capture_output=True, text=True, check=True).stdout
    return out.splitlines()


def starts_alike(env: dict[str, str]) -> bool:
    """Whether a fresh interpreter with `env` would start as this one did, so a forked child can stand in for it: the
    same PYTHON* variables, where PYTHONPATH (which the child searches) may also name the suite, which holds none of
    the libraries the server imported already."""
    return all(env.get(k) == os.environ.get(k) for k in {*env, *os.environ}
               if k.startswith("PYTHON") and k not in ("PYTHON", "PYTHONPATH")) \
        and env.get("PYTHONPATH") in (str(ROOT), os.environ.get("PYTHONPATH"))


def command(module: str, args: list[str], cwd: str, env: dict[str, str], out: str, err: str,
            site: list[str]) -> None:
    """In the forked child: become `python -m MODULE ARGS` in `cwd` with `env`, its output to `out` and `err`."""
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    for fd, path in ((1, out), (2, err)):
        os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), fd)
    # as `python -m` searches: the working directory, PYTHONPATH, then the standard library and site-packages
    sys.path[:] = [cwd, *filter(None, env.get("PYTHONPATH", "").split(os.pathsep)), *site]
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
        p = context().Process(target=command, args=(module, args, str(cwd), env, out, err, site_path()))
        p.start()
        p.join(timeout)
        if p.exitcode is None:
            p.kill()
            p.join()
            raise subprocess.TimeoutExpired([sys.executable, "-m", module, *args], timeout)
        out, err = (Path(f).read_text(errors="replace") if Path(f).exists() else "" for f in (out, err))
        return subprocess.CompletedProcess([sys.executable, "-m", module, *args], p.exitcode, out, err)

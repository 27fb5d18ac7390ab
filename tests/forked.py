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
The sweep such a command starts as its child (`experiments.common.child.run_to_end`) is forked from the same server
in turn, in a session of its own (`Started`), as is a sweep `tests.helpers.faults.launch` starts. `tests.helpers.run`
runs a fresh interpreter instead where the command's environment changes what Python itself reads at start
(`starts_alike`). This module imports nothing of the suite's: the child imports it to run `command`.
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
import time
import types
from multiprocessing.connection import Connection
from pathlib import Path

# The libraries a sweep's parent and the nnbench commands import between them; the workers' frameworks stay out.
# The last six: what a sweep imports once it opens its store and logs (MLflow's SQL store, its run context's git
# and tracing, pandas' plotting, the tables' text widths), a fifth of a second of CPU in every sweep.
PRELOAD = ["mlflow", "mlflow.tracking", "mlflow.store.db.utils", "hydra.main", "hydra._internal.utils",
           "hydra._internal.core_plugins.basic_sweeper", "hydra.core.config_store", "omegaconf", "pandas",
           "scipy.stats", "matplotlib.pyplot", "matplotlib.backends.backend_agg", "psutil",
           "mlflow.store.tracking.sqlalchemy_store", "sqlalchemy.dialects.sqlite", "git",
           "mlflow.tracing.processor.base_mlflow", "pandas.plotting._matplotlib", "wcwidth"]
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
        and set(entries(env)) <= {str(ROOT), *entries(os.environ)}


def entries(env) -> list[str]:
    """The folders PYTHONPATH names in `env`."""
    return list(filter(None, env.get("PYTHONPATH", "").split(os.pathsep)))


def command(module: str, args: list[str], cwd: str, env: dict[str, str], out, err, site: list[str],
            session: bool = False) -> None:
    """In the forked child: become `python -m MODULE ARGS` in `cwd` with `env`, its output to `out` and `err` (a
    file's path, or a `Connection` holding the descriptor it inherits), in a session of its own where `session` (as
    `start_new_session` starts a child)."""
    if session:
        os.setsid()
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    for fd, to in ((1, out), (2, err)):
        os.dup2(os.open(to, os.O_WRONLY | os.O_CREAT | os.O_TRUNC) if isinstance(to, str) else to.fileno(), fd)
    # as `python -m` searches: the working directory, PYTHONPATH, then the standard library and site-packages
    sys.path[:] = [cwd, *entries(env), *site]
    sys.argv = ["-m", *args]  # runpy sets argv[0] to the module's file
    sweeps_forked(site)
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    finally:  # what the interpreter does at exit, in its order; multiprocessing skips atexit
        threading._shutdown()
        atexit._run_exitfuncs()


def sweeps_forked(site: list[str]) -> None:
    """In a forked command: the sweep it starts as a child (`experiments.common.child.run_to_end`: `nnbench ab`,
    `versions`, `bisect`, `ci`, ...) is forked from the same server, as the command was, where a fresh interpreter
    would start alike; any other child it starts is a fresh process, as before."""
    from experiments.common import child  # the command's own module, imported in this child as it would be

    class Subprocess(types.SimpleNamespace):
        @staticmethod
        def Popen(argv, **popen):  # noqa: N802 (subprocess's name)
            if list(argv[:3]) != [sys.executable, "-m", "experiments.run"] or not set(popen) <= {
                    "env", "stdout", "cwd", "start_new_session"} or not starts_alike(popen.get("env", os.environ)):
                return subprocess.Popen(argv, **popen)
            return Started(argv[2], argv[3:], popen.get("cwd") or os.getcwd(), popen.get("env", os.environ),
                           popen.get("stdout"), site=site, server=multiprocessing.get_context("forkserver"))

    child.subprocess = Subprocess(**{k: getattr(subprocess, k) for k in ("CompletedProcess", "TimeoutExpired")})
    # this child's server is the one that forked it: it asks that server, not a new one
    multiprocessing.forkserver._forkserver.ensure_running = lambda: None


class Started:
    """`python -m MODULE ARGS` forked from the server, in a session of its own: what the suite and `run_to_end` read
    of a `subprocess.Popen(..., start_new_session=True, text=True)` (pid, poll, wait, communicate, send_signal,
    returncode; `stdout` and `stderr` text pipes where PIPE is asked, else this process's or the file given)."""

    def __init__(self, module: str, args: list[str], cwd, env: dict[str, str], stdout=None, stderr=None,
                 site: list[str] | None = None, server=None):
        self.args, self.returncode, self.pipes, self.reads = [sys.executable, "-m", module, *args], None, {}, None
        ends = []
        for fd, to in ((1, stdout), (2, stderr)):
            if to == subprocess.PIPE:
                read, write = os.pipe()
                self.pipes[fd] = open(read, errors="replace")
            else:
                write = os.dup(fd if to is None else to.fileno())
            ends.append(Connection(write))
        self.stdout, self.stderr = self.pipes.get(1), self.pipes.get(2)
        self.process = (server or context()).Process(  # in a forked child: the server that forked it
            target=command, args=(module, args, str(cwd), dict(env), *ends, site or site_path(), True))
        main, sys.modules["__main__"] = sys.modules["__main__"], types.ModuleType("__main__")
        try:  # the child runs its own module as __main__: multiprocessing would import this one's there first
            self.process.start()
        finally:
            sys.modules["__main__"] = main
            for end in ends:  # the child holds them now: a pipe ends when the child's copies close
                end.close()
        self.pid = self.process.pid

    def poll(self) -> int | None:
        self.returncode = self.process.exitcode
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        self.process.join(timeout)
        if self.poll() is None:
            raise subprocess.TimeoutExpired(self.args, timeout)
        return self.returncode

    def communicate(self, timeout: float | None = None) -> tuple[str | None, str | None]:
        if self.reads is None:  # read to the end, each pipe in a thread of its own, as Popen does
            self.reads, self.readers = {}, [threading.Thread(
                target=lambda fd=fd, pipe=pipe: self.reads.setdefault(fd, pipe.read()), daemon=True)
                for fd, pipe in self.pipes.items()]
            for reader in self.readers:
                reader.start()
        deadline = None if timeout is None else time.monotonic() + timeout

        def left() -> float | None:
            return None if deadline is None else max(0.0, deadline - time.monotonic())

        for reader in self.readers:
            reader.join(left())
            if reader.is_alive():
                raise subprocess.TimeoutExpired(self.args, timeout)
        self.wait(left())
        return self.reads.get(1), self.reads.get(2)

    def send_signal(self, signum: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, signum)

    def __enter__(self) -> Started:
        return self

    def __exit__(self, *exc) -> None:
        self.wait()


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

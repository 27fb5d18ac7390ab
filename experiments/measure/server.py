"""The fork server: `python -m experiments.measure.server FRAMEWORK`, started once per job (a sweep's groups of one
interpreter and environment share it: `harness.manager.keep`), in the job's interpreter and with the job's allocator
environment (which glibc and the loader read only at exec), imports the framework and the worker once, then forks
one fresh worker per request. Runs on the worker side.

A forked worker must be as fresh as a spawned one for what is measured, so the server forks only while nothing
has started: no XLA backend, no thread pool (jax starts its pools with its first array, torch its OpenMP pool
with its first parallel op), no array. It preloads what the worker would otherwise import lazily (numpy.ma,
torch's compiler modules), so no import lands inside a timed window either; and a user's network (model=file, an
installed package's entry point) is imported before the first fork, so its workers find it imported. A network
whose import starts a thread or jax's backend is refused, in one line that names it.

Protocol, one JSON object per line: the parent writes `{"request", "results", "log"}`; the server answers
`{"pid"}` once the worker runs, then `{"pid", "rc"}` when it has ended (rc < 0: killed by that signal). The first
line the server writes is `{"ready": true}`, or `{"problem": "..."}` where it cannot fork a fresh worker.
"""
from __future__ import annotations

import gc
import json
import os
import sys
import threading
import traceback
from pathlib import Path


def preload(framework: str) -> None:
    """Import what every worker of this framework imports, and nothing that starts a backend or a thread."""
    import numpy.ma  # noqa: F401  here, not in the server's module scope: the probe below must run first
    from importlib import import_module
    from experiments.common.frameworks import traits
    from experiments.measure import worker  # noqa: F401
    from experiments.measure.backends import module

    module(framework)  # jax, flax, optax / torch: imports only; a Backend() would start XLA or the OpenMP pool
    for name in traits(framework).preloads:  # what a worker's first prepare imports otherwise (torch's compiler)
        import_module(name)


def problem(framework: str) -> str | None:
    """Why a fork now would not give a fresh worker (None: it would): any framework's runtime started (this one's,
    or one a user's network imports), or a thread."""
    from experiments.common.frameworks import every  # imported after `preload`, as the worker's own modules are

    if why := next(filter(None, (t.started() for t in every())), None):
        return why
    if threading.active_count() != 1:
        return f"{threading.active_count()} Python threads before fork"
    return None


def preload_model(framework: str, request: str) -> str | None:
    """Import the request's network, if it is a user's; why a fork would not give a fresh worker, or None."""
    # imported after `preload`, as the worker's own modules are: the server's module scope imports nothing
    import models
    from experiments.common.errors import first_line
    from experiments.common.protocol import Request

    try:
        models.preload(**Request.from_json(Path(request).read_text()).model)
    except ValueError as e:
        return first_line(e)
    return problem(framework)


def run_worker(task: dict) -> None:
    """In the forked child: the worker's entry point, its output to its log; never returns."""
    rc = 1
    try:
        log = os.open(task["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)  # the server's requests are not the worker's to read
        sys.argv = ["experiments.measure.worker", task["request"], task["results"]]
        from experiments.measure import worker  # preloaded: no import here

        rc = worker.main(task["request"], task["results"])
    except SystemExit as e:
        rc = e.code if isinstance(e.code, int) else 1
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(rc)


def answer(**fields) -> None:
    sys.stdout.write(json.dumps(fields) + "\n")
    sys.stdout.flush()


def main(framework: str) -> int:
    try:
        preload(framework)
    except ImportError as e:
        answer(problem=f"{e} (in {sys.executable})")
        return 3
    if why := problem(framework):
        answer(problem=why)
        return 3
    answer(ready=True)
    # CPython's advice for a server that forks: keep the collector from touching the objects it inherits (their
    # headers are written by a collection, a copy-on-write fault per page, inside some worker's timed window)
    gc.freeze()
    for line in sys.stdin:
        task = json.loads(line)
        if why := preload_model(framework, task["request"]):
            answer(problem=why)  # the harness spawns this job's workers instead
            continue
        pid = os.fork()
        if pid == 0:
            run_worker(task)
        answer(pid=pid)
        _, status = os.waitpid(pid, 0)
        answer(pid=pid, rc=os.waitstatus_to_exitcode(status))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))

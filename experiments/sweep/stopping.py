"""SIGINT (Ctrl-C) and SIGTERM (what SLURM sends at a time limit): stop the worker at once, keep the rest.

The handler notes the signal as every command's does (`common.interrupts`, whose modes these are). The worker runs in
its own session, so a terminal's Ctrl-C reaches only this process; the handler kills the worker's process group
itself. While a job measures (`graceful`), the handler does only that: the job then saves and logs the points the
worker finished, records the point in progress as interrupted and raises `Signalled` from a safe place. While Hydra
composes and launches jobs in this process (`defer`), a signal waits for the next safe place (the next job's start,
or the end of the sweep): raised inside Hydra's or OmegaConf's code it could turn into their own traceback and leave
the parent run open. Elsewhere (checking the command line, waiting on a launcher's processes) the handler raises at
once. A second signal always raises at once.
"""
from __future__ import annotations

import contextlib
import os
import signal
from typing import Iterator

import psutil

from experiments.common import interrupts as noted
from experiments.common.interrupts import SIGNALS, at_once, defer, ignore, pending  # noqa: F401  the sweep's calls

_stopped_worker = False  # the signal stopped a worker: the job raises once it has seen that worker end


class Stop(BaseException):
    """Ends the sweep from wherever it is; a BaseException, so neither Hydra's job runner nor `except Exception`
    swallows it (Hydra would record it as one failed job and launch the next)."""


class Signalled(Stop):
    """A signal stopped the sweep (`signum`), raised at a safe place: the sweep ends KILLED, exit 128 + `signum`
    (`ending.stopped`). Outside a sweep a command's signal is `common.interrupts.Interrupted`, a KeyboardInterrupt."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class Aborted(Stop):
    """Something no later point can survive (a full disk): the sweep stops, and says so in one line."""


def install(*also: int) -> None:
    """Handle SIGINT and SIGTERM here (only the main thread of a process can), and the signals `also` names (a
    scheduler's warning before a time limit)."""
    noted.install(_handle, *also)


def _handle(signum: int, frame) -> None:
    global _stopped_worker
    now = noted.note(signum)
    _stopped_worker = stop_children(signum) or _stopped_worker
    if now:
        raise Signalled(noted.pending())


def stop_children(signum: int | None = signal.SIGTERM) -> bool:
    """Kill each worker's process group; pass `signum` on to other child processes (a launcher's processes, which
    stop their own workers; None: leave them). True if any child was there, running or not yet reaped."""
    children = psutil.Process().children()
    for c in children:
        with contextlib.suppress(ProcessLookupError, psutil.Error):
            if os.getsid(c.pid) == c.pid:  # a session leader: a worker (start_new_session=True)
                os.killpg(c.pid, signal.SIGKILL)
            elif signum is not None:
                c.send_signal(signum)
    return bool(children)


@contextlib.contextmanager
def _in_mode(mode: str) -> Iterator[None]:
    with noted.in_mode(mode):
        yield
    checkpoint()


def graceful() -> contextlib.AbstractContextManager[None]:
    """A job measures: a signal stops the worker, and the job raises once it has kept what the worker finished."""
    return _in_mode("graceful")


def deferred() -> contextlib.AbstractContextManager[None]:
    """A few store calls that must not be cut in half (a parent run and the state file that names it)."""
    return _in_mode("deferred")


def raise_pending() -> None:
    """Raise if a signal came (the paired engine's checkpoint: a signal's worker kills end its trial, never later)."""
    if (signum := pending()) is not None:
        raise Signalled(signum)


def checkpoint() -> None:
    """A safe place to stop: raise if a signal came, unless it stopped a worker whose end the job has yet
    to see (the points that worker finished are kept first, then its point in progress raises)."""
    global _stopped_worker
    if (signum := noted.pending()) is None:
        return
    graceful_now = noted.mode() == "graceful"
    if graceful_now and not _stopped_worker:
        _stopped_worker = stop_children()  # a worker started after the signal came
    if not graceful_now or not _stopped_worker:
        raise Signalled(signum)

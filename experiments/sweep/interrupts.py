"""SIGINT (Ctrl-C) and SIGTERM (what SLURM sends at a time limit): stop the worker at once, keep the rest.

The worker runs in its own session, so a terminal's Ctrl-C reaches only this process; the handler kills
the worker's process group itself. While a job measures (`graceful`), the handler does only that: the job then
saves and logs the points the worker finished, records the point in progress as interrupted and raises
`Interrupted` from a safe place. While Hydra composes and launches jobs in this process (`defer`), a signal
waits for the next safe place (the next job's start, or the end of the sweep): raised inside Hydra's or
OmegaConf's code it could turn into their own traceback and leave the parent run open. Elsewhere (checking the
command line, waiting on a launcher's processes) the handler raises at once. A second signal always raises at once.
"""
from __future__ import annotations

import contextlib
import os
import signal
import threading
from typing import Iterator

import psutil

SIGNALS = (signal.SIGINT, signal.SIGTERM)
_received: int | None = None
_mode = "raise"  # "raise" at once, or "graceful"/"deferred": note it, stop the worker, raise at a safe point
_stopped_worker = False  # the signal stopped a worker: the job raises once it has seen that worker end


class Stop(BaseException):
    """Ends the sweep from wherever it is; a BaseException, so neither Hydra's job runner nor `except Exception`
    swallows it (Hydra would record it as one failed job and launch the next)."""


class Interrupted(Stop):
    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class Aborted(Stop):
    """Something no later point can survive (a full disk): the sweep stops, and says so in one line."""


def install(*also: int) -> None:
    """Handle SIGINT and SIGTERM here (only the main thread of a process can), and the signals `also` names (a
    scheduler's warning before a time limit)."""
    if threading.current_thread() is threading.main_thread():
        for s in (*SIGNALS, *also):
            signal.signal(s, _handle)


def defer() -> None:
    """From here on, a signal waits for the next `checkpoint` (Hydra runs jobs in this process)."""
    global _mode
    _mode = "deferred"


def at_once() -> None:
    """From here on, a signal raises at once (this process only waits on a launcher's processes)."""
    global _mode
    _mode = "raise"


def ignore() -> None:
    """While the sweep closes after a stop: no second interrupt in the middle of closing."""
    for s in SIGNALS:
        signal.signal(s, signal.SIG_IGN)


def pending() -> int | None:
    """The signal received, if any."""
    return _received


def _handle(signum: int, frame) -> None:
    global _received, _stopped_worker
    first, _received = _received is None, _received or signum
    _stopped_worker = stop_children(signum) or _stopped_worker
    if _mode == "raise" or not first:
        raise Interrupted(_received)


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
    global _mode
    before, _mode = _mode, mode
    try:
        yield
    finally:
        _mode = before
    checkpoint()


def graceful() -> contextlib.AbstractContextManager[None]:
    """A job measures: a signal stops the worker, and the job raises once it has kept what the worker finished."""
    return _in_mode("graceful")


def deferred() -> contextlib.AbstractContextManager[None]:
    """A few store calls that must not be cut in half (a parent run and the state file that names it)."""
    return _in_mode("deferred")


def checkpoint() -> None:
    """A safe place to stop: raise if a signal came, unless it stopped a worker whose end the job has yet
    to see (the points that worker finished are kept first, then its point in progress raises)."""
    global _stopped_worker
    if _received is None:
        return
    if _mode == "graceful" and not _stopped_worker:
        _stopped_worker = stop_children()  # a worker started after the signal came
    if _mode != "graceful" or not _stopped_worker:
        raise Interrupted(_received)

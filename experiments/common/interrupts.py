"""SIGINT and SIGTERM noted by one handler and raised where the code can stop: what the sweep and every command share.

Python runs a signal handler between two bytecodes of the main thread, wherever they are. Inside a gc callback (jax
runs one at every collection), a `__del__`, a weakref callback or an atexit function, an exception the handler raises
is printed as "Exception ignored" and dropped, and the program runs on as if no signal had come. So the handler notes
the signal before anything else. In the mode "raise" (the default) it then raises at once; in "deferred" (and the
sweep's "graceful") it leaves the signal to the code's next `checkpoint`, which raises a noted signal in every mode:
one whose raise was dropped is raised there (and its drop is not printed). A second signal while the first waits
raises at once. In "closing" (a command has ended, the process is exiting) a signal is only noted, for the process's
end to honour (`guard_exit`).
"""
from __future__ import annotations

import atexit
import contextlib
import os
import signal
import sys
import threading
from typing import Callable, Iterator

SIGNALS = (signal.SIGINT, signal.SIGTERM)
Handler = Callable[[int, object], None]
_received: int | None = None  # the first signal noted
_mode = "raise"
_honoured: int | None = None  # the signal noted when the command ended: its exit says it
_exit_code: int | None = None  # the command's, once it has ended (`exit_with`)
_unraisable_before = sys.unraisablehook


class Interrupted(KeyboardInterrupt):
    """A noted signal, raised: a KeyboardInterrupt, so whatever stops on Ctrl-C stops on it; exit 128 + `signum`."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def install(handler: Handler | None = None, *also: int) -> None:
    """Handle SIGINT and SIGTERM, and the signals `also` names, by `handler` (this module's, by default); only the
    main thread of a process can. Installed whatever they were: a shell starts a background job with SIGINT ignored."""
    global _unraisable_before
    if threading.current_thread() is threading.main_thread():
        for s in (*SIGNALS, *also):
            signal.signal(s, handler or _handle)
        if sys.unraisablehook is not _unraisable:
            _unraisable_before, sys.unraisablehook = sys.unraisablehook, _unraisable


def note(signum: int) -> bool:
    """Note a signal (the first one is kept); whether it must raise at once: in the mode "raise", or a second one
    while the first waits (unless the process is closing)."""
    global _received
    first, _received = _received is None, _received or signum
    return _mode == "raise" or (not first and _mode != "closing")


def _handle(signum: int, frame) -> None:
    if note(signum):
        raise Interrupted(_received)


def _unraisable(u) -> None:
    """The handler's raise, dropped by Python (in a gc callback, a `__del__`, ...): not printed, since the signal is
    noted and the next checkpoint raises it; any other exception as Python's hook says it."""
    if not isinstance(u.exc_value, Interrupted):
        _unraisable_before(u)


def pending() -> int | None:
    """The signal noted, if any."""
    return _received


def mode() -> str:
    return _mode


def defer() -> None:
    """From here on, a signal waits for the next `checkpoint`."""
    global _mode
    _mode = "deferred"


def at_once() -> None:
    """From here on, a signal raises at once."""
    global _mode
    _mode = "raise"


def ignore() -> None:
    """No signal from here on (a sweep closing after a stop)."""
    for s in SIGNALS:
        signal.signal(s, signal.SIG_IGN)


@contextlib.contextmanager
def in_mode(new: str) -> Iterator[None]:
    """The mode `new` while the block runs, then the mode before; a signal noted meanwhile is the caller's to raise."""
    global _mode
    before, _mode = _mode, new
    try:
        yield
    finally:
        _mode = before


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """Code that must stop only at its checkpoints (frameworks at work in this process): a signal waits for the
    next one, or the block's end."""
    with in_mode("deferred"):
        yield
    checkpoint()


def checkpoint() -> None:
    """A safe place to stop: raise the signal noted, if any."""
    if _received is not None:
        raise Interrupted(_received)


@contextlib.contextmanager
def handled() -> Iterator[None]:
    """This module's handler while the block runs, from a fresh start (nothing noted, the mode "raise"); the
    handlers before it, and a fresh start, after the block (a command run inside another program, as tests run them)."""
    global _received, _mode, _honoured
    main = threading.current_thread() is threading.main_thread()
    before, hook = ({s: signal.getsignal(s) for s in SIGNALS} if main else {}), sys.unraisablehook
    _received, _mode, _honoured = None, "raise", None
    install()
    try:
        yield
    finally:
        for s, h in before.items():
            signal.signal(s, h)
        sys.unraisablehook = hook
        _received, _mode, _honoured = None, "raise", None


def closing() -> int | None:
    """The command has ended: the signal noted so far, which its exit must say; from here a signal is only noted,
    for `guard_exit` to honour. Idempotent."""
    global _mode, _honoured
    if _mode != "closing":
        _mode, _honoured = "closing", _received
    return _honoured


def guard_exit(say: Callable[[int], None]) -> None:
    """For a process that runs one command, called first, so that its atexit function runs last: it ends the process
    with the command's exit code (`exit_with`), or, where a signal came after the command had ended (in the other
    atexit functions), says it by `say(signum)` and exits 128 + signum. It ends the process at once (os._exit),
    without the interpreter's teardown, where Python puts the default handlers back and a signal would kill the
    process without a word (jax's and torch's objects take a second to tear down)."""
    atexit.register(_last, say)


def exit_with(code: int) -> None:
    """The command's exit code, for `guard_exit`'s end of the process."""
    global _exit_code
    closing()
    _exit_code = code


def _last(say: Callable[[int], None]) -> None:
    if _exit_code is None:  # the command did not end by returning (argparse's --help exits): Python's own exit
        return
    code = _exit_code
    if _received is not None and _honoured is None:
        say(_received)
        code = 128 + _received
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)

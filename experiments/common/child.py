"""A sweep run as a child process (`versions`, `bisect`, `calibrate`, `overhead`), waited for to its end.

`subprocess.run` SIGKILLs its child 0.25 s after a Ctrl-C, which would cut a sweep in the middle of closing its
runs (left RUNNING). Here the child runs in its own session, so a terminal's Ctrl-C reaches this process only, and
each interrupt is passed on to the child once (the sweep's own rule: the first stops it gracefully, a second at
once); the child is waited for, then the interrupt goes on up. A signal whose raise a callback dropped
(`common.interrupts`) is passed on too, within a poll.
"""
from __future__ import annotations

import signal
import subprocess

from experiments.common import interrupts

POLL_S = 0.5


def run_to_end(argv: list[str], **popen) -> subprocess.CompletedProcess:
    """`subprocess.run(argv, **popen)`, whose child always ends on its own: an interrupt is passed on, not a kill."""
    stop: KeyboardInterrupt | None = None
    with subprocess.Popen(argv, start_new_session=True, **popen) as proc:
        while True:
            try:  # goes on reading its pipes after an interrupt (a full one would block the child)
                out, err = proc.communicate(timeout=POLL_S)
                break
            except subprocess.TimeoutExpired:
                if stop is None and (signum := interrupts.pending()):
                    stop = interrupts.Interrupted(signum)
                    proc.send_signal(signum)
            except KeyboardInterrupt as e:
                stop = stop or e
                proc.send_signal(getattr(e, "signum", signal.SIGINT))
    if stop is not None:
        raise stop
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)

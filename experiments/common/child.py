"""A sweep run as a child process (`versions`, `bisect`, `calibrate`, `overhead`), waited for to its end.

`subprocess.run` SIGKILLs its child 0.25 s after a Ctrl-C, which would cut a sweep in the middle of closing its
runs (left RUNNING). Here the child runs in its own session, so a terminal's Ctrl-C reaches this process only, and
each interrupt is passed on to the child once (the sweep's own rule: the first stops it gracefully, a second at
once); the child is waited for, then the interrupt goes on up.
"""
from __future__ import annotations

import signal
import subprocess


def run_to_end(argv: list[str], **popen) -> subprocess.CompletedProcess:
    """`subprocess.run(argv, **popen)`, whose child always ends on its own: an interrupt is passed on, not a kill."""
    with subprocess.Popen(argv, start_new_session=True, **popen) as proc:
        try:
            out, err = proc.communicate()
        except KeyboardInterrupt:
            proc.send_signal(signal.SIGINT)
            while True:
                try:
                    proc.communicate()  # goes on reading its pipes (a full one would block the child)
                    break
                except KeyboardInterrupt:
                    proc.send_signal(signal.SIGINT)
            raise
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)

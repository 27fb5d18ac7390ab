"""The paired engine's turns rest on one reading of /proc (harness.turns.stopped): a worker counts as stopped only
once every thread of it is, and a worker that is gone counts as stopped."""
import os
import signal
import subprocess
import sys
import time

from experiments.harness.turns import stopped


def until(predicate, seconds: float = 5.0) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.01)
    return False


def test_a_worker_is_stopped_once_every_thread_is_and_gone_counts():
    p = subprocess.Popen([sys.executable, "-c", "import time\nwhile True: time.sleep(0.01)"])
    try:
        assert not stopped(p.pid)
        os.kill(p.pid, signal.SIGSTOP)
        assert until(lambda: stopped(p.pid))
        os.kill(p.pid, signal.SIGCONT)
        assert until(lambda: not stopped(p.pid))
    finally:
        p.kill()
        p.wait()
    assert stopped(p.pid)  # reaped: no /proc entry

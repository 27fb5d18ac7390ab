"""What a sweep's signal handler does to the processes it started: each worker's whole process group killed, the
signal passed on to a launcher's processes (which stop their own workers)."""
import os
import subprocess
import sys

from tests.forked import ROOT

# Run in a process of its own: a stop reaches every child of the process that calls it, here the test's own.
STOP = """
import signal, subprocess, time
import psutil
from experiments.sweep.stopping import stop_children


def alive(pid):
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


# A worker (a session of its own, with a child of its own) and a launcher's process (in this process's session).
# Neither holds the test's pipes: one left running fails the test in seconds.
worker = subprocess.Popen(["sh", "-c", "sleep 60 & echo $!; wait"], stdout=subprocess.PIPE,
                          stderr=subprocess.DEVNULL, text=True, start_new_session=True)
inside = int(worker.stdout.readline())
launcher = subprocess.Popen(["sleep", "60"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
stopped = stop_children(signal.SIGTERM)
codes = worker.wait(5), launcher.wait(5)
deadline = time.monotonic() + 5  # the worker's child, killed with its group
while alive(inside) and time.monotonic() < deadline:
    time.sleep(0.05)
print(stopped, *codes, alive(inside), stop_children(signal.SIGTERM))
"""


def test_a_stop_kills_each_workers_group_and_passes_the_signal_to_other_children():
    r = subprocess.run([sys.executable, "-c", STOP], cwd=ROOT, capture_output=True, text=True, timeout=60,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode == 0, r.stderr[-2000:]
    # the worker and its child killed (SIGKILL: -9), the launcher's process sent the signal (SIGTERM: -15); then no
    # child is left to stop
    assert r.stdout.split() == ["True", "-9", "-15", "False", "False"]

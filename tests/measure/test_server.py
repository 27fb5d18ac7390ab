"""The fork server's own checks, in-process: a fork is refused while a second Python thread runs, since the worker
it made would not be as fresh as a spawned one."""
import threading

from experiments.common import frameworks
from experiments.measure import server


def test_a_fork_is_refused_while_another_thread_runs(monkeypatch):
    monkeypatch.setattr(frameworks, "every", lambda: [])  # no framework's runtime counts here: the threads alone
    before = threading.active_count()
    stop = threading.Event()
    t = threading.Thread(target=stop.wait)
    t.start()
    try:
        assert server.problem("torch") == f"{before + 1} Python threads before fork"
    finally:
        stop.set()
        t.join()


def test_a_started_runtime_is_named(monkeypatch):
    class Started:
        def started(self):
            return "jax's backend started before fork"

    monkeypatch.setattr(frameworks, "every", lambda: [Started()])
    assert server.problem("jax") == "jax's backend started before fork"

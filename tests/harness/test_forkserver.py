"""Workers forked by a job's fork server are as fresh as spawned ones for what is measured: nothing started before
the fork (no thread, no XLA backend, no OpenMP pool), one compile per process, no import in a timed window; a paired
trial's worker, forked by the same server, too."""
import subprocess
import sys
from dataclasses import replace

import numpy as np
import pytest

from experiments.common.config import bench_budget
from experiments.common.protocol import Point, Request, Setup
from experiments.harness import manager, pairs
from tests.helpers import FORMAT, ROOT


def request(framework: str, compile: bool) -> Request:
    """Two points of exactly 300 timed calls each, so page faults per call compare alike whatever the load."""
    budget = replace(bench_budget("quick"), min_block_s=0.0, min_samples=300, max_samples=300, max_time_s=1e9)
    return Request(framework, Setup("fp32", "cpu", compile=compile, memory_format=FORMAT[framework]),
                   {"name": "lenet"}, 0, budget, (Point(2, ("inference",)), Point(8, ("inference",))))


@pytest.mark.slow
@pytest.mark.parametrize("framework", ["jax", "torch"])
def test_forked_workers_measure_like_spawned_ones(tmp_path, framework):
    """The server is ready only once it has checked that nothing runs yet; each forked worker then sets its
    framework up itself, compiles once, and takes few page faults per timed call."""
    env = manager.environ("glibc", tmp_path / "cache")
    server = manager.ForkServer(sys.executable, framework, env, tmp_path / "server.log")
    try:
        forked = manager.run(request(framework, framework == "jax"), tmp_path / "fork", 120,
                             launcher=manager.Launcher(server=server))
        side = pairs.Side(framework, request(framework, framework == "jax"), sys.executable, env, "fork", 120)
        with pairs.Workers([side], [server], tmp_path / "paired").start() as workers:  # a paired trial's worker
            trial = pairs.run_cell(workers, pairs.Cell(8, "inference"), pairs.Design(rounds=3), 0,
                                   np.random.default_rng(0))
    finally:
        server.close()
    assert server.proc.returncode == 0  # it ended when its requests did
    spawned = manager.run(request(framework, framework == "jax"), tmp_path / "spawn", 120,
                          launcher=manager.Launcher(cache=tmp_path / "cache"))
    for got in (forked, spawned):
        assert [r.failure for r in got] == [None, None]
        for r in got:
            op = r.ops["inference"]
            assert op.device == "cpu" and op.compiles == (1 if framework == "jax" else None)
    for f, s in zip(forked, spawned):  # copy-on-write pages or a lazy import would fault in the timed calls
        fork_faults, spawn_faults = (r.ops["inference"].page_faults_per_call for r in (f, s))
        assert fork_faults <= 2 * spawn_faults + 1, (fork_faults, spawn_faults)
    assert forked[0].startup_s < spawned[0].startup_s  # the fork paid no interpreter start and no imports
    (turn,) = trial.turns
    assert turn.ok and len(turn.bursts) == 3 and turn.prepared.compiles == (1 if framework == "jax" else None)
    assert turn.bursts[-1].compiles == turn.prepared.compiles  # no compile in a burst either
    assert turn.ready.startup_s < spawned[0].startup_s


@pytest.mark.slow
def test_the_server_refuses_to_fork_once_something_runs():
    """A started XLA backend (its thread pools) or a second Python thread would be copied into every worker."""
    backend = ("import jax\nfrom experiments.measure import server\nprint(server.problem('jax'))\n"
               "jax.devices()\nprint(server.problem('jax'))\nprint(server.problem('torch'))")  # a network's jax too
    thread = ("import threading\nfrom experiments.measure import server\nprint(server.problem('torch'))\n"
              "threading.Thread(target=lambda: __import__('time').sleep(2), daemon=True).start()\n"
              "print(server.problem('torch'))")
    outs = [subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True).stdout
            for code in (backend, thread)]
    assert outs[0].splitlines() == ["None"] + ["the XLA backend started before fork"] * 2
    assert outs[1].splitlines() == ["None", "2 Python threads before fork"]


def test_a_server_that_cannot_start_is_one_line_and_the_job_spawns(tmp_path, fake_python):
    """An interpreter that can't run the server (here a stand-in): ServerUnavailable, and run() spawns instead."""
    with pytest.raises(manager.ServerUnavailable):
        manager.ForkServer(fake_python, "torch", manager.environ(), tmp_path / "server.log", timeout_s=30)


@pytest.mark.slow
def test_a_sweeps_groups_share_its_fork_servers_until_its_end(tmp_path):
    """keep(): a group's idle server serves the sweep's next group of the same interpreter, framework and
    environment, so the framework is imported once per sweep; another environment gets a server of its own, a
    server whose worker may still run is closed, not shared; close_kept ends the ones kept."""
    environ = manager.environ("glibc", tmp_path / "cache")
    manager.keep()
    try:
        first = manager.fork_server(sys.executable, "jax", environ, tmp_path / "a.log")
        manager.done(first)
        assert manager.fork_server(sys.executable, "jax", environ, tmp_path / "b.log") is first
        other = manager.fork_server(sys.executable, "jax", manager.environ("system", tmp_path / "cache"),
                                    tmp_path / "c.log")
        assert other is not first and other.proc.pid != first.proc.pid
        lost = tmp_path / "lost.json"  # a paired worker whose parent is gone: it ends once it finds no socket
        lost.write_text(replace(request("jax", False), paired=str(tmp_path / "no-socket")).to_json())
        first.start(lost, tmp_path / "r.jsonl", tmp_path / "w.log")  # its worker, not waited for
        manager.done(first)
        manager.done(other)
        assert first.proc.wait(30) == 0 and other.proc.poll() is None  # the busy one closed, the idle one kept
    finally:
        manager.close_kept()
    assert other.proc.wait(30) == 0 and manager.KEPT is None  # and from here a server given back is closed

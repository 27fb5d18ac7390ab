"""Paired workers: only one runs at a time (the idle one stopped, every thread, taking no CPU, its fork server too),
the bursts alternate as designed and every burst's samples are kept, two frameworks pair, framework.threads reaches
both, a fault fails only its pair and leaves nothing behind, and an inconclusive point gets more pairs."""
import dataclasses
import math
import os
import signal
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import psutil
import pytest

from experiments.common.protocol import Burst, Point, Prepared, Request, Setup
from experiments.harness import manager, pairs
from experiments.measure.verdict import Verdict, judge_pairs
from tests.helpers import FORMAT, TINY, budget


def side(tmp_path, label: str, framework: str = "torch", start: str = "fork", model: str = "mlp_relu",
         op: str = "inference", threads: int | None = None) -> pairs.Side:
    setup = Setup("fp32", "cpu", compile=framework == "jax", memory_format=FORMAT[framework], threads=threads)
    req = Request(framework, setup, {"name": model, **TINY.get(model, {})}, 0,
                  budget("quick", warmup_s=0.01, warmup_calls=2), (Point(2, (op,)),))
    return pairs.Side(label, req, sys.executable, manager.environ("glibc", tmp_path / "cache" / label), start, 120)


@pytest.fixture(scope="module")
def torch_pair(tmp_path_factory):
    """Two torch sides (A/A) and their fork servers, shared by the tests that fork torch workers."""
    tmp = tmp_path_factory.mktemp("pairs")
    a, b = side(tmp, "A"), side(tmp, "B")
    with ThreadPoolExecutor(2) as pool:
        servers = dict(zip("AB", pool.map(pairs.server, (a, b), (tmp / "sa.log", tmp / "sb.log"))))
    yield a, b, servers
    for s in servers.values():
        s.close()


def cpu_s(pid: int) -> float:
    """The process's own CPU time, all its threads."""
    t = psutil.Process(pid).cpu_times()
    return t.user + t.system


@pytest.fixture
def watched(monkeypatch):
    """Every paired worker started, and, around each burst, the other workers' CPU time and state, and the CPU time
    of the processes in `also` (the fork servers)."""
    live, seen, also = [], [], []
    start, burst = pairs.PairedWorker.__init__, pairs.PairedWorker.burst

    def init(self, *args, **kwargs):
        start(self, *args, **kwargs)
        live.append(self)

    def timed(self, seconds):
        others = [w for w in live if w is not self and w.rc is None and w.family]
        before = [cpu_s(w.worker.pid) for w in others]
        servers = [cpu_s(pid) for pid in also]
        out = burst(self, seconds)
        seen.append({"running": self.name, "others": [w.name for w in others],
                     "stopped": [pairs.stopped(w.worker.pid) for w in others],
                     "cpu_grew": [cpu_s(w.worker.pid) - b for w, b in zip(others, before)],
                     "servers_grew": [cpu_s(pid) - b for pid, b in zip(also, servers)]})
        return out

    monkeypatch.setattr(pairs.PairedWorker, "__init__", init)
    monkeypatch.setattr(pairs.PairedWorker, "burst", timed)
    return live, seen, also


def test_the_idle_worker_is_stopped_and_takes_no_cpu_while_the_other_bursts(tmp_path, watched, torch_pair):
    """torch A/A, forked: during each of B's bursts A is stopped (every thread) and its CPU time does not grow, nor
    that of either fork server (they wait in waitpid); and the other way round. The bursts go AB, BA, AB, ..."""
    live, seen, also = watched
    a, b, servers = torch_pair
    also += [s.proc.pid for s in servers.values()]
    design = pairs.Design(burst_s=0.05, rounds=6)
    r = pairs.run_pair(a, b, a.request.points[0], design, 0, servers, tmp_path / "pair", np.random.default_rng(0))
    assert r.failure is None, r.stderr_tail
    assert r.order == "ABBAABBAABBA" and len(r.a_bursts) == len(r.b_bursts) == 6
    assert len(seen) == 12 and all(s["others"] == [{"A": "B", "B": "A"}[s["running"]]] for s in seen)
    assert all(s["stopped"] == [True] for s in seen)
    assert all(s["cpu_grew"] == [0.0] and s["servers_grew"] == [0.0, 0.0] for s in seen), seen
    for p, bursts in ((r.a, r.a_bursts), (r.b, r.b_bursts)):
        assert p.status == "ok" and p.device == "cpu" and p.compiles is None and p.block >= 1
        assert p.threads == int(p.environment["torch_num_threads"]) and p.cores == len(os.sched_getaffinity(0))
        assert all(x.samples_s and x.meter["wall_s"] > 0 for x in bursts)
        assert sum(len(x.samples_s) for x in bursts) * p.block >= 6  # every block's per-call time is kept
    assert math.isfinite(r.log_ratio)
    assert pairs.PairResult.from_json((tmp_path / "pair" / pairs.PAIR).read_text()) == r  # every burst on disk
    assert not any(psutil.pid_exists(w.worker.pid) and psutil.Process(w.worker.pid).status() != "zombie"
                   for w in live)


def test_jax_and_torch_workers_pair_and_framework_threads_reaches_both(tmp_path, watched, torch_pair):
    """jax against torch, both with framework.threads=1: jax's worker runs on one core (XLA's pool follows it) and
    compiles once, however many bursts; torch runs one intra-op thread."""
    a = side(tmp_path, "jax", "jax", threads=1)
    b = side(tmp_path, "torch", "torch", threads=1)
    servers = {"A": pairs.server(a, tmp_path / "sa.log"), "B": torch_pair[2]["B"]}
    try:
        r = pairs.run_pair(a, b, a.request.points[0], pairs.Design(burst_s=0.03, rounds=4), 1, servers,
                           tmp_path / "pair", np.random.default_rng(0))
    finally:
        servers["A"].close()
    assert r.failure is None, r.stderr_tail
    assert r.order == "BAABBAAB"
    assert r.a.compiles == 1 and all(x.compiles == 1 for x in r.a_bursts)
    assert r.a.threads == r.a.cores == 1 and r.a.machine["cpu_affinity"] == 1
    assert r.b.threads == 1 and r.b.environment["torch_num_threads"] == "1"
    assert all(s["stopped"] == [True] and s["cpu_grew"] == [0.0] for s in watched[1])


def test_a_worker_that_dies_fails_its_pair_and_leaves_no_worker_behind(tmp_path, watched, monkeypatch, torch_pair):
    live = watched[0]
    burst = pairs.PairedWorker.burst
    calls = []

    def dying(self, seconds):
        calls.append(self.name)
        if len(calls) == 3:
            os.kill(self.worker.pid, signal.SIGKILL)
        return burst(self, seconds)

    monkeypatch.setattr(pairs.PairedWorker, "burst", dying)
    a, _, servers = torch_pair
    b = side(tmp_path, "B", start="spawn")  # spawned: its own session, killed whole
    r = pairs.run_pair(a, b, a.request.points[0], pairs.Design(burst_s=0.02, rounds=5), 0, {**servers, "B": None},
                       tmp_path / "pair", np.random.default_rng(0))
    assert r.failure == "worker B killed by SIGKILL (likely out of memory)" and r.log_ratio is None
    assert "--- worker B" in r.stderr_tail
    time.sleep(0.2)
    assert not any(psutil.pid_exists(w.worker.pid) and psutil.Process(w.worker.pid).status() != "zombie"
                   for w in live)  # neither left stopped nor running


def test_an_op_a_side_cannot_run_is_skipped_without_bursts(tmp_path, torch_pair):
    """matmul_chain has constant weights: no training op; the pair says why, and has no bursts."""
    a, b, servers = torch_pair
    a, b = (dataclasses.replace(s, request=dataclasses.replace(s.request, model={"name": "matmul_chain", **TINY[
        "matmul_chain"]}, points=(Point(2, ("training",)),))) for s in (a, b))
    r = pairs.run_pair(a, b, a.request.points[0], pairs.Design(), 0, servers, tmp_path, np.random.default_rng(0))
    assert r.failure is None and r.a.status == "skipped" and r.a.reason.startswith("matmul_chain has constant weights")
    assert not r.a_bursts and not r.b_bursts and r.log_ratio is None


def test_an_external_runner_is_refused(tmp_path):
    ext = dataclasses.replace(side(tmp_path, "A"), request=dataclasses.replace(side(tmp_path, "A").request,
                                                                                 framework="external"))
    with pytest.raises(ValueError, match="framework=external can't be paired"):
        pairs.compare(ext, side(tmp_path, "B"), pairs.Design(), judge_pairs, tmp_path)


def test_inconclusive_points_get_more_pairs_until_a_planted_five_percent_is_found(tmp_path, monkeypatch):
    """Pairs whose log ratios spread 3% (stand-ins for workers): with 6 pairs and up to 12 for an inconclusive point,
    a 5% slowdown is found in at least 90% of 180 comparisons, and A/A says slower or faster in at most 5%; an op a
    side can't run is skipped after its first pair."""
    rng = np.random.default_rng(0)
    effect = {}

    def fake(a, b, point, design, index, servers, directory, rng_):
        if point.batch_size == 4:  # an op a side can't run
            return pairs.PairResult(index, "", Prepared("ok"), Prepared("skipped", reason="no such op here"))
        log = rng.normal(math.log(effect[point.batch_size]), 0.03)
        ok = Prepared("ok")
        return pairs.PairResult(index, "AB", ok, ok, [Burst([1.0])], [Burst([math.exp(log)])])

    monkeypatch.setattr(pairs, "run_pair", fake)
    a, b = side(tmp_path, "A", start="spawn"), side(tmp_path, "B", start="spawn")
    points = tuple(Point(bs, ("inference",)) for bs in (1, 2, 3, 4))
    a, b = (dataclasses.replace(s, request=dataclasses.replace(s.request, points=points)) for s in (a, b))
    verdicts, grown = {1.0: [], 1.05: []}, 0
    for planted in verdicts:
        effect.update({1: planted, 2: planted, 3: planted})
        for _ in range(60):
            *judged, skipped = pairs.compare(a, b, pairs.Design(), judge_pairs, tmp_path)
            assert skipped.skipped == "no such op here" and len(skipped.pairs) == 1
            assert skipped.verdict.verdict == "no verdict"
            for c in judged:
                verdicts[planted].append(c.verdict.verdict)
                grown += len(c.pairs) > pairs.PAIRS
                assert len(c.pairs) <= pairs.MAX_PAIRS and c.verdict.pairs == len(c.pairs)
    assert sum(v == Verdict.SLOWER for v in verdicts[1.05]) >= 0.9 * 180
    assert sum(v in ("slower", "faster") for v in verdicts[1.0]) <= 0.05 * 180
    assert grown > 0  # some points needed more pairs

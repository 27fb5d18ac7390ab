"""Paired trials (harness/pairs.py): one worker runs at a time, the idle ones stopped (every thread, taking no CPU,
their fork servers neither) and the parent computing nothing while one measures; the rounds' order rotates; every
burst's samples are kept; jax and torch take turns, three sides in one trial too, framework.threads reaching both; a
worker that dies fails only its trial's cell for its side and leaves nothing behind; an op a side can't run is
skipped; other processes' CPU use is read over a cell's rounds; an unsettled cell gets more trials until a planted
difference is found."""
import dataclasses
import math
import os
import resource
import signal
import subprocess
import sys
import threading
import time
import types
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import psutil
import pytest

from experiments.common.protocol import Burst, Point, Prepared, Ready, Request, Setup
from experiments.harness import manager, pairs
from experiments.stats.paired import judge_pairs
from experiments.stats.verdicts import Verdict
from tests.helpers import FORMAT, TINY, budget

CELL = pairs.Cell(2, "inference")
CELLS = [CELL, pairs.Cell(4, "inference")]  # two cells a trial goes through
QUIET_SHARE = 0.05  # the most of a trial's bursts' wall time the parent may spend on CPU meanwhile
NEAR = 0.15  # cores: how far a trial's reading of other processes' use may be from their own CPU times' (ticks)


def side(tmp_path, label: str, framework: str = "torch", start: str = "fork", model: str = "mlp_relu",
         ops: tuple[str, ...] = ("inference",), threads: int | None = None, **sizes) -> pairs.Side:
    setup = Setup("fp32", "cpu", compile=framework == "jax", memory_format=FORMAT[framework], threads=threads)
    req = Request(framework, setup, {"name": model, **TINY.get(model, {}), **sizes}, 0,
                  budget("quick", warmup_s=0.01, warmup_calls=2), (Point(2, ops),))
    return pairs.Side(label, req, sys.executable, manager.environ("glibc", tmp_path / "cache" / label), start, 120)


@pytest.fixture(scope="module")
def torch_servers(tmp_path_factory):
    """Two torch fork servers, shared by the tests that fork torch workers (each side needs its own: a server's
    messages say how its one live worker ended)."""
    tmp = tmp_path_factory.mktemp("servers")
    a, b = side(tmp, "A"), side(tmp, "B")
    with ThreadPoolExecutor(2) as pool:
        servers = list(pool.map(pairs.server, (a, b), (tmp / "sa.log", tmp / "sb.log")))
    assert all(servers), "a torch fork server did not start"
    yield servers
    for s in servers:
        s.close()


@pytest.fixture
def lent(monkeypatch, torch_servers):
    """A Session's fork servers are the shared ones (side A's and side B's, by the letter of their log), which it
    does not close; every other side's worker is spawned."""
    def server(s: pairs.Side, log):
        i = "AB".find(log.stem[-1])
        if s.start != "fork" or s.request.framework != "torch" or i < 0:
            return None
        return types.SimpleNamespace(start=torch_servers[i].start, proc=torch_servers[i].proc, close=lambda: None)

    monkeypatch.setattr(pairs, "server", server)
    return torch_servers


def cpu_s(pid: int) -> float:
    """The process's own CPU time, all its threads."""
    t = psutil.Process(pid).cpu_times()
    return t.user + t.system


def gone(workers) -> bool:
    """Whether every worker has ended and been reaped (neither left stopped nor running)."""
    return not any(psutil.pid_exists(w.worker.pid) and psutil.Process(w.worker.pid).status() != "zombie"
                   for w in workers)


@dataclasses.dataclass
class Watched:
    live: list  # every paired worker started
    seen: list  # per burst: who ran, the others' state and CPU growth, the fork servers' CPU growth
    also: list  # the pids whose CPU time must not grow during any burst (the fork servers)
    parent: dict  # trial dir -> [the parent's CPU seconds, wall seconds] while its workers measured a burst


@pytest.fixture
def watched(monkeypatch):
    """Every paired worker started; around each burst, the other workers' CPU time and state, and the CPU time of
    the processes in `also`; and the parent's own CPU time (every thread: getrusage(RUSAGE_SELF)) from the moment
    the burst command is sent to the moment its answer is in, which is all the time the worker measures."""
    w = Watched([], [], [], {})
    start, burst, read = pairs.PairedWorker.__init__, pairs.PairedWorker.burst, pairs.PairedWorker.read
    bursting = threading.local()

    def init(self, *args, **kwargs):
        start(self, *args, **kwargs)
        w.live.append(self)

    def timed(self, seconds):
        others = [o for o in w.live if o is not self and o.rc is None and o.family]
        before, servers = [cpu_s(o.worker.pid) for o in others], [cpu_s(pid) for pid in w.also]
        bursting.on = True
        try:
            out = burst(self, seconds)
        finally:
            bursting.on = False
        w.seen.append({"running": self.name, "others": [o.name for o in others],
                       "stopped": [pairs.stopped(o.worker.pid) for o in others],
                       "cpu_grew": [cpu_s(o.worker.pid) - b for o, b in zip(others, before)],
                       "servers_grew": [cpu_s(pid) - b for pid, b in zip(w.also, servers)]})
        return out

    def answer(self, timeout):  # called by `ask` once the command is sent
        if not getattr(bursting, "on", False):
            return read(self, timeout)
        cpu, wall = own_cpu(), time.perf_counter()
        out = read(self, timeout)
        spent = w.parent.setdefault(self.log.parent.name, [0.0, 0.0])
        spent[0] += own_cpu() - cpu
        spent[1] += time.perf_counter() - wall
        return out

    monkeypatch.setattr(pairs.PairedWorker, "__init__", init)
    monkeypatch.setattr(pairs.PairedWorker, "burst", timed)
    monkeypatch.setattr(pairs.PairedWorker, "read", answer)
    return w


def own_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def loud(w: Watched) -> dict[str, float]:
    """The trials in which the parent spent more than QUIET_SHARE of its workers' bursts on the CPU: trial -> share."""
    assert w.parent, "no burst was watched"
    return {trial: cpu / wall for trial, (cpu, wall) in w.parent.items() if cpu > QUIET_SHARE * wall}


@pytest.mark.slow
def test_the_idle_workers_are_stopped_take_no_cpu_and_every_burst_is_kept(tmp_path, watched, lent):
    """torch A/A over two cells in two trials, forked: during each burst the other worker is stopped (every thread)
    and its CPU time does not grow, nor that of either fork server (they wait in waitpid: a clock tick at most), and
    the parent spends (almost) nothing; the rounds go AB, BA, ..., from the side drawn to open them, and which
    worker starts first, which prepares first and each side's memory layout are drawn too, each recorded; every
    trial's cell is on disk with every burst; no worker is left."""
    watched.also += [s.proc.pid for s in lent]
    design = pairs.Design(burst_s=0.03, rounds=6, trials=2, max_trials=2)
    compared = pairs.Session([side(tmp_path, "A"), side(tmp_path, "B")], CELLS, design, tmp_path / "trials").run()
    assert [c.cell.name for c in compared] == ["bs2-inference", "bs4-inference"]
    seen = watched.seen
    assert len(seen) == 2 * 2 * 12 and all(s["others"] == [{"A": "B", "B": "A"}[s["running"]]] for s in seen)
    assert all(s["stopped"] == [True] for s in seen)
    assert all(s["cpu_grew"] == [0.0] for s in seen), [s for s in seen if s["cpu_grew"] != [0.0]]
    # A server that spun would take a core through each 30 ms burst; one clock tick (10 ms) may land on a server that
    # a loaded machine left between its answer and its waitpid
    grew = [g for s in seen for g in s["servers_grew"]]
    assert max(grew) <= 0.01 + 1e-9 and sum(grew) <= 0.02 + 1e-9, [s for s in seen if any(s["servers_grew"])]
    assert set(watched.parent) == {"trial-0", "trial-1"} and not loud(watched), watched.parent
    for c in compared:
        assert [t.index for t in c.trials] == [0, 1]
        assert all(t.order in ("ABBA" * 3, "BAAB" * 3) for t in c.trials)
        assert all(sorted(t.started) == sorted(t.preparation) == ["A", "B"] for t in c.trials)
        assert len({turn.layout for t in c.trials for turn in t.turns}) == 4  # drawn per side, trial and cell
        for t in c.trials:
            assert t.failure is None and math.isfinite(t.log_ratio(1, 0)) and t.wall_s > 0
            assert pairs.Trial.from_json((tmp_path / "trials" / c.cell.name / f"trial-{t.index}.json").read_text()) == t
            for turn in t.turns:
                r, p = turn.ready, turn.prepared
                assert r.threads == int(r.environment["torch_num_threads"]) and r.cores == len(os.sched_getaffinity(0))
                assert p.status == "ok" and p.device == "cpu" and p.compiles is None and p.block >= 1
                assert len(turn.bursts) == 6 and all(x.samples_s and x.meter["wall_s"] > 0 for x in turn.bursts)
                assert sum(len(x.samples_s) for x in turn.bursts) * p.block >= 6  # every block's per-call time
    assert len(watched.live) == 4 and gone(watched.live)  # one worker per side per trial, each ended


@pytest.mark.parametrize("spin", [False, True], ids=["quiet", "busy thread"])
def test_the_parent_computes_nothing_while_a_worker_measures(tmp_path, watched, lent, spin):
    """The parent's own CPU time over a trial's bursts stays under 5% of their wall time; a thread of the parent's
    that spins meanwhile (a poller, a progress bar that computes) is caught by the same check."""
    a, b = side(tmp_path, "A"), side(tmp_path, "B")
    stop = threading.Event()

    def spinning():
        while not stop.is_set():
            pass

    if spin:
        threading.Thread(target=spinning, daemon=True).start()
    try:
        with pairs.Workers([a, b], lent, tmp_path / "trial-0").start() as workers:
            trial = pairs.run_cell(workers, CELL, pairs.Design(burst_s=0.03, rounds=6), 0, np.random.default_rng(0))
    finally:
        stop.set()
    assert trial.failure is None and len(watched.seen) == 12
    assert bool(loud(watched)) == spin, watched.parent


def test_a_lone_side_is_never_stopped(tmp_path, watched, lent):
    """A group of one variant: its worker bursts round after round and is never stopped (no one takes turns)."""
    (c,) = pairs.Session([side(tmp_path, "A")], [CELL], pairs.Design(burst_s=0.02, rounds=4, trials=1, max_trials=1),
                         tmp_path).run()
    (t,) = c.trials
    assert t.order == "AAAA" and t.turns[0].ok and t.log_ratio(0, 0) == 0.0
    assert [w.family for w in watched.live] == [[]] and not loud(watched)  # stop() was never called


def test_a_cell_whose_blocks_outlast_its_bursts_ends_after_fewer_rounds(tmp_path, watched, lent):
    """Bursts of 0.1 ms, where a block of calls lasts about 1 ms (bench=quick's min_block_s): the first round
    shows it, and the cell ends after fewer of the rounds asked (rounds_for: MIN_ROUNDS where the block took 1 ms; a
    few more where the warm-up that sized the block ran slower than the burst, on a busy core), every burst kept."""
    design = pairs.Design(burst_s=1e-4, rounds=4 * pairs.MIN_ROUNDS, trials=1, max_trials=1)
    (c,) = pairs.Session([side(tmp_path, "A")], [CELL], design, tmp_path).run()
    (t,) = c.trials
    rounds = pairs.rounds_for(design, t.turns[0].bursts[:1])
    assert pairs.MIN_ROUNDS <= rounds < design.rounds
    assert t.turns[0].ok and t.order == "A" * rounds and len(t.turns[0].bursts) == rounds


def test_a_cell_whose_calls_outlast_a_burst_takes_fewer_rounds_of_the_same_samples():
    def burst(wall_s):
        return Burst([wall_s], {"wall_s": wall_s})

    design = pairs.Design(burst_s=0.02, rounds=25)  # 0.5 s of each side's samples per trial
    assert pairs.rounds_for(design, [burst(0.021), burst(0.02)]) == 25  # a burst's worth of calls: all rounds
    assert pairs.rounds_for(design, [burst(0.021), burst(0.039)]) == 25  # a call or two a burst: as asked
    assert pairs.rounds_for(design, [burst(0.021), burst(0.05)]) == 10  # 10 × 50 ms: the same 0.5 s
    assert pairs.rounds_for(design, [burst(0.3), burst(0.1)]) == pairs.MIN_ROUNDS  # a median of no fewer rounds
    assert pairs.rounds_for(design, [burst(0.07)] * 3) == 9  # whole rotations: each side first as often
    assert pairs.rounds_for(pairs.Design(rounds=4), [burst(0.3), burst(0.3)]) == 4  # never more than asked
    assert pairs.rounds_for(design, [Burst([0.3]), Burst([0.3])]) == 25  # unmetered bursts: as asked


def test_the_rounds_order_rotates_each_side_first_in_turn():
    rng = np.random.default_rng(0)
    abba = pairs.Design(rounds=4)
    assert pairs.orders(abba, 0, [0, 1], rng) == [[0, 1], [1, 0], [0, 1], [1, 0]]
    assert pairs.orders(abba, 1, [0, 1], rng) == [[1, 0], [0, 1], [1, 0], [0, 1]]
    assert pairs.orders(abba, 0, [0, 1, 2], rng) == [[0, 1, 2], [1, 2, 0], [2, 0, 1], [0, 1, 2]]
    assert pairs.orders(abba, 2, [0, 1, 2], rng)[0] == [2, 0, 1]
    assert pairs.orders(abba, 0, [0, 2], rng)[:2] == [[0, 2], [2, 0]]  # a side that sat the cell out: no turn
    drawn = pairs.orders(pairs.Design(rounds=200, order="random"), 0, [0, 1, 2], rng)
    assert all(sorted(r) == [0, 1, 2] for r in drawn) and len({tuple(r) for r in drawn}) == 6


def test_jax_and_two_torch_sides_take_turns_in_one_trial_and_framework_threads_reaches_both(tmp_path, watched,
                                                                                             torch_servers):
    """jax (framework.threads=1) between two torch sides (one with framework.threads=1): each burst runs with both
    others stopped, taking no CPU; the rounds put each side first in turn (from one drawn per cell); jax's worker
    runs on one core (XLA's pool follows it) and compiles once, however many bursts; torch runs one intra-op
    thread where asked."""
    jax, torch1, torch = (side(tmp_path, "jax", "jax", threads=1), side(tmp_path, "torch1", threads=1),
                          side(tmp_path, "torch"))
    jax_server = pairs.server(jax, tmp_path / "sj.log")
    try:
        with pairs.Workers([torch1, jax, torch], [torch_servers[0], jax_server, torch_servers[1]],
                           tmp_path / "trial").start() as workers:
            t = pairs.run_cell(workers, CELL, pairs.Design(burst_s=0.03, rounds=3), 1, np.random.default_rng(0))
    finally:
        jax_server.close()
    assert t.failure is None, t.stderr_tail
    rotations = ["ABC", "BCA", "CAB"]
    first = rotations.index(t.order[:3])  # the side that opens the rounds is drawn; then each first in turn
    assert t.order == "".join(rotations[(first + r) % 3] for r in range(3))
    assert sorted(t.preparation) == ["A", "B", "C"] and t.started == "ABC"
    assert all(len(s["others"]) == 2 and s["stopped"] == [True, True] and s["cpu_grew"] == [0.0, 0.0]
               for s in watched.seen) and len(watched.seen) == 9
    t1, j, t2 = t.turns
    assert j.prepared.compiles == 1 and all(x.compiles == 1 for x in j.bursts) and len(j.bursts) == 3
    assert j.ready.threads == j.ready.cores == 1 and j.ready.machine["cpu_affinity"] == 1
    assert t1.ready.threads == 1 and t1.ready.environment["torch_num_threads"] == "1"
    assert t2.ready.threads == int(t2.ready.environment["torch_num_threads"])
    assert math.isfinite(t.log_ratio(1, 0)) and math.isfinite(t.log_ratio(2, 0)) and gone(watched.live)


def test_a_worker_that_dies_fails_only_its_cell_for_its_side(tmp_path, watched, monkeypatch, lent):
    """B's worker is killed in its third burst of trial 0's first cell: that cell fails there for B (and names B),
    fresh workers measure trial 0's other cell, and in trial 1 A measures the failed cell alone while B sits it out;
    no worker is left, stopped or running."""
    burst, calls = pairs.PairedWorker.burst, []

    def dying(self, seconds):
        calls.append(self.name)
        if calls.count("B") == 3 and self.name == "B" and len(watched.live) == 2:
            os.kill(self.worker.pid, signal.SIGKILL)
        return burst(self, seconds)

    monkeypatch.setattr(pairs.PairedWorker, "burst", dying)
    design = pairs.Design(burst_s=0.02, rounds=4, trials=2, max_trials=2)
    first, second = pairs.Session([side(tmp_path, "A"), side(tmp_path, "B")], CELLS, design, tmp_path).run()
    died, alone = first.trials
    assert died.index == 0 and died.failed_side == 1
    assert died.failure == "worker B killed by SIGKILL (likely out of memory)" and "--- worker B" in died.stderr_tail
    assert died.log_ratio(1, 0) is None and first.failed() == {1} and not first.done(2)
    assert alone.index == 1 and alone.failure is None and alone.order == "AAAA"
    assert alone.turns[0].ok and alone.turns[1].prepared is None and not alone.turns[1].bursts
    assert first.log_ratios(1, 0) == [] and first.log_ratios(0, 0) == [0.0]
    assert [t.failure for t in second.trials] == [None, None] and len(second.log_ratios(1, 0)) == 2
    assert len(watched.live) == 2 + 2 + 2 and gone(watched.live)  # trial 0 twice, trial 1 once


def test_an_op_a_side_cannot_run_is_skipped_without_bursts(tmp_path, torch_servers):
    """matmul_chain has constant weights: no training op; both sides say why, and no one bursts."""
    a, b = (side(tmp_path, n, model="matmul_chain", ops=("training",)) for n in "AB")
    t = pairs.run_pair(pairs.Workers([a, b], torch_servers, tmp_path), pairs.Cell(2, "training"), pairs.Design(), 0,
                       np.random.default_rng(0))
    assert t.failure is None and t.order == ""
    assert all(x.skipped.startswith("matmul_chain has constant weights") and not x.bursts for x in t.turns)
    assert t.log_ratio(1, 0) is None


def test_an_external_runner_is_refused(tmp_path):
    ext = side(tmp_path, "A")
    ext = dataclasses.replace(ext, request=dataclasses.replace(ext.request, framework="external"))
    with pytest.raises(ValueError, match="framework=external can't be paired"):
        pairs.compare(ext, side(tmp_path, "B"), pairs.Design(), judge_pairs, tmp_path)


def processes_cpu(skip: set[int]) -> dict[tuple[int, float], float]:
    """Every process but those in `skip`, by (pid, start time): its CPU time with its reaped children's."""
    out = {}
    for p in psutil.process_iter():
        try:
            if p.pid not in skip:
                t = p.cpu_times()
                out[(p.pid, p.create_time())] = t.user + t.system + t.children_user + t.children_system
        except psutil.Error:
            continue
    return out


def others_cpu(before: dict, after: dict) -> float:
    """The CPU seconds the processes spent between two readings: a process born meanwhile, all of its own; one that
    ended meanwhile, what it spent after the first reading (whoever reaped it holds all of it in its children's)."""
    spent = sum(cpu - before.get(k, 0.0) for k, cpu in after.items())
    return spent - sum(cpu for k, cpu in before.items() if k not in after)


@pytest.mark.parametrize("loop", [False, True], ids=["quiet", "busy loop beside"])
def test_other_processes_cpu_is_read_over_a_cells_rounds(tmp_path, monkeypatch, watched, lent, loop):
    """A trial's reading of other processes' CPU use (the machine's busy time less its workers' and the parent's)
    matches what the other processes' own CPU times say over its rounds: near zero on a quiet machine, about one
    core more with a busy loop running beside the trial. Both are read here as the machine is: others' tests may
    run meanwhile."""
    windows, meter = [], pairs.meter

    def metered():  # the processes read just outside the trial's own reading: the parent's CPU there is not theirs
        skip = {os.getpid(), *(p.pid for w in watched.live for p in [w.worker, *w.family])}
        if not windows:
            windows.append(processes_cpu(skip))
            return meter()
        out = meter()
        windows.append(processes_cpu(skip))
        return out

    monkeypatch.setattr(pairs, "meter", metered)
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if loop else None
    try:
        with pairs.Workers([side(tmp_path, "A"), side(tmp_path, "B")], lent, tmp_path / "trial").start() as workers:
            t = pairs.run_cell(workers, CELL, pairs.Design(burst_s=0.03, rounds=15), 0, np.random.default_rng(0))
    finally:
        if busy:
            busy.kill()
            busy.wait()
    before, after = windows
    wall, read = t.meter["wall_s"], t.background_cores()
    others = others_cpu(before, after) / wall
    # the workers ran more of the rounds than NEAR: a reading that counted their time as others' would be off
    assert t.failure is None and wall > 0 and t.meter["workers_cpu_s"] > NEAR * wall, t.meter
    assert abs(read - others) < NEAR, (read, others, t.meter)
    if loop:  # the loop's own share of the rounds, read as the others' are: about a core where nothing else runs
        key = next(k for k in after if k[0] == busy.pid)
        looped = (after[key] - before[key]) / wall
        assert looped > NEAR and read > looped - NEAR, (read, looped, others)


def test_an_unsettled_cell_gets_more_trials_until_a_planted_difference_is_found(tmp_path, lent):
    """matmul_chain 8× as deep on B's side: one trial can't settle it (no verdict), so it gets more, up to four,
    until it is slower."""
    a = side(tmp_path, "A", model="matmul_chain", depth=2)
    b = side(tmp_path, "B", model="matmul_chain", depth=16)
    design = pairs.Design(burst_s=0.02, rounds=5, trials=1, max_trials=4)
    (c,) = pairs.compare(a, b, design, judge_pairs, tmp_path)
    assert c.verdict.verdict == Verdict.SLOWER and c.verdict.ratio > 1.5
    # A trial far off the others while another program ran is set aside (kept, not judged): the suite runs beside it.
    aside = c.compared.set_aside(1, 0)
    assert 2 <= len(c.compared.trials) <= 4 and c.verdict.pairs == len(c.log_ratios)
    assert len(c.log_ratios) + len(aside) == len(c.compared.trials)


class StandIn:
    """A trial's workers, not started: `run_cell` is faked too."""

    def __init__(self, sides, servers, directory, units=None, stage=0):
        self.ready, self.absent, self.lives = [Ready() for _ in sides], set(), []

    def start(self, one_by_one=False, order=None):
        return self

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None


@pytest.mark.slow
def test_unsettled_cells_get_more_trials_until_a_planted_five_percent_is_found(tmp_path, monkeypatch):
    """Trials whose log ratios spread 3% (stand-ins for workers): with 6 trials and up to 12 for a cell the judge
    leaves unsettled, a 5% slowdown is found in at least 90% of 180 comparisons, and A/A says slower or faster in at
    most 5%; an op a side can't run gets no more trials than the first ones."""
    rng = np.random.default_rng(0)
    effect = {}

    def fake(workers, cell, design, index, rng_, skip=frozenset()):
        if cell.batch_size == 4:  # an op a side can't run
            return pairs.Trial(index, [pairs.Turn(prepared=Prepared("ok")),
                                       pairs.Turn(prepared=Prepared("skipped", reason="no such op here"))])
        ok, log = Prepared("ok"), rng.normal(math.log(effect[cell.batch_size]), 0.03)
        return pairs.Trial(index, [pairs.Turn(prepared=ok, bursts=[Burst([1.0])]),
                                   pairs.Turn(prepared=ok, bursts=[Burst([math.exp(log)])])], "AB")

    monkeypatch.setattr(pairs, "Workers", StandIn)
    monkeypatch.setattr(pairs, "run_cell", fake)
    a, b = (dataclasses.replace(s, request=dataclasses.replace(s.request, points=(Point(1, ("inference",)), Point(
        2, ("inference",)), Point(3, ("inference",)), Point(4, ("inference",)))))
        for s in (side(tmp_path, "A", start="spawn"), side(tmp_path, "B", start="spawn")))
    verdicts, grown = {1.0: [], 1.05: []}, 0
    for planted in verdicts:
        effect.update({1: planted, 2: planted, 3: planted})
        for _ in range(60):
            *judged, skipped = pairs.compare(a, b, pairs.Design(), judge_pairs, tmp_path)
            assert skipped.compared.skipped(1) == "no such op here" and len(skipped.compared.trials) == pairs.TRIALS
            assert skipped.verdict.verdict == Verdict.UNKNOWN
            for c in judged:
                verdicts[planted].append(c.verdict.verdict)
                grown += len(c.compared.trials) > pairs.TRIALS
                assert len(c.compared.trials) <= pairs.MAX_TRIALS and c.verdict.pairs == len(c.compared.trials)
    assert sum(v == Verdict.SLOWER for v in verdicts[1.05]) >= 0.9 * 180
    assert sum(v in (Verdict.SLOWER, Verdict.FASTER) for v in verdicts[1.0]) <= 0.05 * 180
    assert grown > 0  # some cells needed more trials


def test_odd_trials_take_the_cells_in_reverse_order(tmp_path, monkeypatch):
    """No cell always comes first in a process's life: trials 0 and 2 go through the cells in order, trial 1 in
    reverse (stand-ins for the workers)."""
    seen = []

    def fake(workers, cell, design, index, rng_, skip=frozenset()):
        seen.append((index, cell.batch_size))
        ok = Prepared("ok")
        return pairs.Trial(index, [pairs.Turn(prepared=ok, bursts=[Burst([1.0])]),
                                   pairs.Turn(prepared=ok, bursts=[Burst([1.0])])], "AB")

    monkeypatch.setattr(pairs, "Workers", StandIn)
    monkeypatch.setattr(pairs, "run_cell", fake)
    a, b = (dataclasses.replace(s, request=dataclasses.replace(s.request, points=tuple(
        Point(n, ("inference",)) for n in (1, 2, 3)))) for s in (side(tmp_path, "A", start="spawn"),
                                                                 side(tmp_path, "B", start="spawn")))
    pairs.Session([a, b], pairs.cells_of(a.request.points), pairs.Design(trials=3, max_trials=3), tmp_path).run()
    assert seen == [(0, 1), (0, 2), (0, 3), (1, 3), (1, 2), (1, 1), (2, 1), (2, 2), (2, 3)]

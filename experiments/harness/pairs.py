"""Paired comparisons: the variants of a cell measured by warm workers that take turns in short bursts, the idle
ones stopped, in fresh trials. Parent side.

A *side* is one variant (a framework set-up, an environment); a *cell* is one point's op (batch size and op); a
*trial* is one fresh worker per side that goes through the cells one after another: for each cell, every worker
prepares it (built, compiled, warmed up, one at a time), then `Design.rounds` rounds of one burst per side, only one
worker running at a time (fewer rounds where one call outlasts a burst: `rounds_for`). The next cell frees the
previous one's model.

Why: a process's speed drifts in plateaus of about a second on a shared machine, and each process settles at a level
of its own, so sides measured one after another differ by more than the changes worth finding. Interleaving
bursts well inside a plateau makes every side see the same machine; fresh trials make each process's own bias part
of the evidence. The idle workers are stopped, every thread (`turns`), and the parent computes nothing while a
worker bursts: it waits in a read.

The unit of evidence is one trial: log(side/base), the median of its rounds' log ratios (`ratios.pair_log_ratio`).
The caller judges the cells from their trials (`settled`); a cell it leaves unsettled gets more trials, up to
`Design.max_trials`. Each trial's cell is saved to disk as it ends (`<cell>/trial-<n>.json`), every burst kept.

Where a device admits one process at a time (a TPU chip), sides of one environment share a worker and workers of
different environments alternate, whole processes one after another per trial (`designs`).

The rooms: `trials` (the data), `turns` (the workers taking turns), `designs` (which sides share a worker, which
workers alternate), this module (the rounds, trials and session); callers use this module's names.
"""
from __future__ import annotations

import dataclasses
import math
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from experiments.common.config import EXTERNAL
from experiments.common.protocol import Burst
from experiments.harness import designs, manager
from experiments.harness.trials import (BURST_S, MAX_TRIALS, MIN_ROUNDS, ORDERS, ROUNDS, TRIAL, TRIALS, Cell, Compared,
                                        Design, Side, Trial, Turn, cells_of, letter)
from experiments.harness.designs import plan
from experiments.harness.turns import PairedWorker, PairFailed, Workers, server, stopped
from experiments.measure.meter import meter

__all__ = ["BURST_S", "MAX_TRIALS", "MIN_ROUNDS", "ORDERS", "ROUNDS", "TRIAL", "TRIALS", "Cell", "Compared", "Design",
           "Judged", "PairFailed", "PairedWorker", "Session", "Settled", "Side", "Trial", "Turn", "Workers", "cells_of",
           "compare", "orders", "plan", "rounds_for", "run_cell", "run_pair", "server", "stopped"]

# The layouts a side's worker is given for a cell (`Turn.layout`): measure/worker.py's `shifted` reads 4096 heap
# offsets and 4096 page offsets from one.
LAYOUTS = 1 << 24


def orders(design: Design, start: int, sides: list[int], rng: np.random.Generator) -> list[list[int]]:
    """The sides' order in each round: rotating (AB, BA, AB, ... for two sides; each side first in turn, from the
    one at `start` in `sides`), or drawn at random."""
    if design.order == "random":
        return [list(rng.permutation(sides)) for _ in range(design.rounds)]
    k = len(sides)
    return [sides[(r + start) % k:] + sides[:(r + start) % k] for r in range(design.rounds)]


def rounds_for(design: Design, first: list[Burst]) -> int:
    """A cell's rounds, from its first round's bursts: `design.rounds`, or fewer where a side's burst took over twice
    its length (a burst is then one long call): as many as give each side `design.rounds` bursts' worth of samples,
    at least MIN_ROUNDS, and a whole number of rotations, so each side goes first equally often."""
    longest = max(b.meter.get("wall_s", design.burst_s) for b in first)
    if longest <= 2 * design.burst_s:
        return design.rounds
    wanted = max(MIN_ROUNDS, math.ceil(design.rounds * design.burst_s / longest))
    k = len(first)
    return min(design.rounds, math.ceil(wanted / k) * k)


def run_cell(workers: Workers, cell: Cell, design: Design, index: int, rng: np.random.Generator,
             skip: set[int | None] = frozenset()) -> Trial:
    """One cell in a trial: each worker prepares it while the others are stopped, then `design.rounds` rounds of one
    burst per side, one worker running at a time. Which side prepares first, which opens the rounds and where in
    memory each side's buffers land (`Turn.layout`, measure/worker.py: shifted) are drawn from `rng` and recorded
    (with `Trial.started`, `preparation`, `order`), so no side is favoured by its place or its fork server's memory
    image. The sides in `skip` (their worker failed on this cell before, or it runs in another stage) sit it out.
    PairFailed for a worker that crashed, hung or would not stop."""
    t0, live, turns = time.perf_counter(), workers.live, workers.taking_turns  # a worker alone is never stopped
    trial = Trial(index, [Turn(ready=r) for r in workers.ready], started=workers.order)
    for i in (int(i) for i in rng.permutation(len(live)) if i not in skip):
        live[i].cont() if turns else None
        trial.turns[i].layout = int(rng.integers(LAYOUTS))
        trial.turns[i].prepared = live[i].prepare(cell, layout=trial.turns[i].layout)
        live[i].stop() if turns else None
        trial.preparation += letter(i)
    ok = [i for i, t in enumerate(trial.turns) if t.prepared is not None and t.prepared.status == "ok"]
    before, cpu, rounds = meter(), sum(w.cpu_s() for w in live), design.rounds
    for r, seq in enumerate(orders(design, int(rng.integers(len(ok))), ok, rng) if ok else ()):
        if r == rounds:
            break
        for i in seq:
            live[i].cont() if turns else None
            trial.turns[i].bursts.append(live[i].burst(design.burst_s))
            live[i].stop() if turns else None
            trial.order += letter(i)
        rounds = rounds_for(design, [trial.turns[i].bursts[0] for i in ok]) if r == 0 else rounds
    after = meter()
    trial.meter = {k: after[k] - before[k] for k in after} | {"workers_cpu_s": sum(w.cpu_s() for w in live) - cpu}
    trial.wall_s = time.perf_counter() - t0
    return trial


Settled = Callable[[list[Compared]], list[bool]]  # the cells judged together: which need no more trials


class Session:
    """The sides compared on the cells: `design.trials` fresh trials over every cell, then more trials over the cells
    the caller's judge leaves unsettled, up to `design.max_trials`. `compared` holds every trial so far, also after
    an interrupt, which the caller handles. A side whose worker failed on a cell (a crash, an OOM kill, a timeout)
    sits that cell out from then on; the trial goes on with fresh workers for its other cells. `checkpoint` is
    called after each cell and before a fault is recorded: it raises where the caller must stop (a signal). Which
    sides share a worker and which workers alternate: `plan` (`designs`, by `design.paired_design`)."""

    def __init__(self, sides: list[Side], cells: list[Cell], design: Design, directory: Path,
                 on_trial: Callable[[Compared, Trial], None] = lambda c, t: None,
                 checkpoint: Callable[[], None] = lambda: None):
        if any(s.request.framework == EXTERNAL for s in sides):
            raise ValueError("framework=external can't be paired: its runner times itself, so its bursts can't take "
                             "turns with another worker's")
        self.sides, self.design, self.directory, self.on_trial = sides, design, directory, on_trial
        self.checkpoint = checkpoint
        self.plan = designs.plan(sides, design.paired_design)
        self.compared = [Compared(c) for c in cells]
        self.rng = np.random.default_rng(design.seed)
        self.trials = 0

    def run(self, settled: Settled = lambda cs: [True] * len(cs)) -> list[Compared]:
        firsts = [unit[0] for unit in self.plan.units]  # a unit's worker is its first side's
        servers = [None] * len(self.sides)
        with ThreadPoolExecutor(len(firsts)) as pool:  # the servers import their frameworks at once
            for i, s in zip(firsts, pool.map(server, [self.sides[i] for i in firsts],
                                             (self.directory / f"server-{letter(i)}.log" for i in firsts))):
                servers[i] = s
        try:
            for _ in range(self.design.trials):
                self.trial(list(range(len(self.compared))), servers)
            while more := self.unsettled(settled):
                self.trial(more, servers)
            return self.compared
        finally:
            for s in servers:
                if s is not None:
                    manager.done(s)

    def unsettled(self, settled: Settled) -> list[int]:
        """The cells that get one more trial, while a side is left to measure them: unsettled ones, up to max_trials
        trials that measured them; and those that failed trials left unmeasured (the failed side sits them out, so
        the sides left measure them: else one failure in a sweep of one trial would leave them nothing)."""
        return [i for i, (c, ok) in enumerate(zip(self.compared, settled(self.compared)))
                if not c.done(len(self.sides)) and c.measured() < (1 if ok else self.design.max_trials)]

    def trial(self, which: list[int], servers: list) -> None:
        """One fresh trial over the cells `which` that a side is left to measure, in order (reversed in odd trials,
        so no cell always comes first in a process's life), its stages one after another, each cell kept once
        every stage measured it (or a signal stopped them)."""
        index, self.trials = self.trials, self.trials + 1
        todo = [i for i in which if not self.compared[i].done(len(self.sides))][::1 if index % 2 == 0 else -1]
        stages = self.plan.ordered(index, self.design.seed)
        if len(stages) == 1:
            self.stage(stages[0], 0, todo, index, servers, self.keep)
            return
        parts: dict[int, list[Trial]] = {i: [] for i in todo}
        try:
            for n, units in enumerate(stages):
                self.stage(units, n, list(todo), index, servers, lambda i, t: parts[i].append(t))
        finally:  # an interrupt keeps what the stages so far measured
            for i in (i for i in todo if parts[i]):
                self.keep(i, designs.merged(parts[i], len(self.sides), [self.plan.names(units) for units in stages]))

    def stage(self, units: tuple[int, ...], n: int, todo: list[int], index: int, servers: list,
              take: Callable[[int, Trial], object]) -> None:
        """The cells `todo` measured by the workers of the plan's `units`, the `n`-th stage of trial `index`, each
        cell's trial handed to `take`; fresh workers again after a fault. A worker whose sides all sit out every
        cell left (each failed there before: one that can't start, say) is not started."""
        while todo:
            out = set.intersection(*(self.compared[i].failed() for i in todo))
            mine = [self.plan.units[u] for u in units if not set(self.plan.units[u]) <= out]
            if not mine:
                return
            try:
                order = [int(i) for i in self.rng.permutation(len(mine))]  # which worker starts first: drawn
                workers = Workers(self.sides, servers, self.directory / f"trial-{index}", mine, n).start(index == 0,
                                                                                                     order)
            except PairFailed as e:  # a worker that can't start fails every cell it would measure
                self.checkpoint()
                for i in todo:
                    take(i, Trial(index, [], failure=str(e), failed_side=e.side, hung=e.hung,
                                  stderr_tail=self.tails(index)))
                return
            with workers:
                while todo:
                    trial = self.cell(workers, todo.pop(0), index, take)
                    if trial.failure is not None:
                        break  # its workers are spent: fresh ones for the rest

    def cell(self, workers: Workers, i: int, index: int, take: Callable[[int, Trial], object]) -> Trial:
        c = self.compared[i]
        try:
            trial = run_cell(workers, c.cell, self.design, index, self.rng, c.failed() | workers.absent)
        except PairFailed as e:
            self.checkpoint()  # a signal killed the workers: not a fault of this cell
            if e.side is not None:  # hung, or would not stop: killed, not asked to end (30 s more of waiting)
                workers.live[e.side].kill()
            trial = Trial(index, [Turn(ready=r) for r in workers.ready], failure=str(e), failed_side=e.side,
                          hung=e.hung, stderr_tail=self.tails(index))
        trial.workers = workers.lives  # read when the trial is kept: by then a stage's workers have ended
        take(i, trial)
        self.checkpoint()
        return trial

    def keep(self, i: int, trial: Trial) -> Trial:
        """The trial's cell saved in the cell's directory and added to it; the caller hears of it."""
        c = self.compared[i]
        where = self.directory / c.cell.name
        where.mkdir(parents=True, exist_ok=True)
        trial.paired_design = self.plan.name
        trial.workers = [dataclasses.replace(w) for w in trial.workers]  # as they are now: a live one's end unknown
        (where / TRIAL.format(trial.index)).write_text(trial.to_json())
        c.trials.append(trial)
        self.on_trial(c, trial)
        return trial

    def tails(self, index: int) -> str:
        """The last lines of trial `index`'s worker logs."""
        logs = sorted((self.directory / f"trial-{index}").glob("*.log"))
        return "\n".join(f"--- worker {p.stem}\n{p.read_text(errors='replace')[-1500:]}" for p in logs)


def run_pair(workers: Workers, cell: Cell, design: Design, index: int, rng: np.random.Generator) -> Trial:
    """One trial of two sides on one cell, with fresh workers (`workers`, started here: the burst-length
    self-check's unit)."""
    try:
        with workers.start():
            return run_cell(workers, cell, design, index, rng)
    except PairFailed as e:
        return Trial(index, [], failure=str(e), failed_side=e.side)


@dataclass
class Judged:
    """A cell of a two-sided comparison (B against A) and its verdict."""

    compared: Compared
    verdict: Any  # the judge's

    @property
    def log_ratios(self) -> list[float]:
        return self.compared.log_ratios(1, 0)


def compare(a: Side, b: Side, design: Design, judge: Callable[[list[list[float]]], list], directory: Path,
            on_trial: Callable[[Compared, Trial], None] = lambda c, t: None) -> list[Judged]:
    """B against A on the cells of A's points, paired, each cell judged by `judge` (`paired.judge_pairs`: its
    verdicts say whether they are `conclusive`) at every look `design.looks`, its spread at least its rounds' own
    (`Compared.floor`): more trials for a cell while it is not, up to `design.max_trials`; none for a cell a side
    can't run."""
    session = Session([a, b], cells_of(a.request.points), design, directory, on_trial)
    judged = lambda cs: judge([c.log_ratios(1, 0) for c in cs], looks=design.looks,  # noqa: E731
                              floors=[c.floor(1, 0) for c in cs])
    settled = lambda cs: [v.conclusive or c.skipped(0) is not None or c.skipped(1) is not None  # noqa: E731
                          for c, v in zip(cs, judged(cs))]
    compared = session.run(settled)
    return [Judged(c, v) for c, v in zip(compared, judged(compared))]

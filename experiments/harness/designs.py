"""Which sides of a comparison share a worker, and which workers live together, for a device that only one process at
a time may open (a TPU chip: a second process stops at libtpu's lockfile, and each opening costs seconds). Parent
side; `pairs.Session` follows the plan.

A *unit* is one worker process serving one side or several: several sides of one environment take turns inside it,
each side's op prepared once and its bursts run on command, in the rounds' order (`pairs.orders`). A *stage* is the
units alive together, taking turns in bursts, the idle ones stopped; a trial runs its stages one after another, each
worker exiting before the next stage's start, in an order drawn per trial. `bench.paired_design`:

- `bursts`: a worker per side, all in one stage (for a device any number of processes may open);
- `in-process`: the sides of one environment share a worker; the workers of different environments alternate;
- `alternating`: a worker per side, each in a stage of its own;
- `auto`: sides on a device one process at a time may open (`Setup.exclusive`) as `in-process`, the others as
  `bursts`: beside the one worker holding the device where there is one, in a stage of their own where several
  alternate.

Each trial's log ratio still compares the sides' rounds; where their workers alternate, the rounds are adjacent
processes' (more trials weigh more there).
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from experiments.common.config import PAIRED_DESIGNS
from experiments.harness import manager
from experiments.harness.trials import Side, Trial, Turn, letter

AUTO, BURSTS, IN_PROCESS, ALTERNATING = PAIRED_DESIGNS
# Environment variables that may differ between sides whose workers could be one process: where each side's compiler
# keeps its cache (per environment fingerprint, which the precision policy is part of). A shared worker uses its
# first side's.
CACHE_DIRS = {k for k, v in manager.cache_environ(Path("a")).items() if manager.cache_environ(Path("b"))[k] != v}


@dataclass(frozen=True)
class Plan:
    """The sides (by index) each worker serves, and the workers (units, by index) of each stage."""

    units: tuple[tuple[int, ...], ...]
    stages: tuple[tuple[int, ...], ...]

    def unit(self, side: int) -> int:
        return next(u for u, sides in enumerate(self.units) if side in sides)

    def stage(self, unit: int) -> int:
        return next(s for s, units in enumerate(self.stages) if unit in units)

    def design(self, side: int, base: int) -> str:
        """How a side took turns with its base: inside one worker, in bursts of workers alive together, or in workers
        that alternate."""
        a, b = self.unit(side), self.unit(base)
        if a == b:
            return IN_PROCESS if len(self.units[a]) > 1 else BURSTS
        return BURSTS if self.stage(a) == self.stage(b) else ALTERNATING

    @property
    def name(self) -> str:
        """Every design between two of its sides, `+`-joined (`bursts+in-process`): `bursts` for a side alone."""
        n = sum(map(len, self.units))
        used = {self.design(a, b) for a in range(n) for b in range(n) if a != b} or {BURSTS}
        return "+".join(d for d in PAIRED_DESIGNS if d in used)

    def ordered(self, index: int, seed: int) -> list[tuple[int, ...]]:
        """Trial `index`'s stages in the order they run: drawn at random in even trials, reversed in the odd trial
        after, so each stage comes first as often over two trials."""
        if len(self.stages) == 1:
            return list(self.stages)
        drawn = np.random.default_rng([seed, index // 2]).permutation(len(self.stages))
        return [self.stages[k] for k in (drawn if index % 2 == 0 else drawn[::-1])]

    def names(self, stage: tuple[int, ...]) -> str:
        """A stage's workers by their sides' letters: `AB C`."""
        return " ".join("".join(map(letter, self.units[u])) for u in stage)


def plan(sides: list[Side], chosen: str) -> Plan:
    """The plan of `bench.paired_design` (`chosen`) for these sides (module docstring)."""
    if chosen == ALTERNATING:
        return Plan(tuple((i,) for i in range(len(sides))), tuple((u,) for u in range(len(sides))))
    held = [chosen == IN_PROCESS or (chosen == AUTO and s.request.setup.exclusive) for s in sides]
    units: dict[object, list[int]] = {}
    for i, s in enumerate(sides):
        units.setdefault(environment(s) if held[i] else i, []).append(i)
    order = tuple(tuple(u) for u in units.values())
    holding = [u for u, unit in enumerate(order) if held[unit[0]]]
    if len(holding) <= 1:
        return Plan(order, (tuple(range(len(order))),))
    rest = tuple(u for u in range(len(order)) if u not in holding)
    return Plan(order, tuple((u,) for u in holding) + ((rest,) if rest else ()))


def environment(side: Side) -> str:
    """What sides must have in common to share a worker: interpreter, framework, start, model, seed and budget, the
    device and threads (a process's own), fp64 or not (a process-wide mode: jax's x64), and every environment
    variable but the compile caches' dirs."""
    r, s = side.request, side.request.setup
    environ = {k: v for k, v in side.environ.items() if k not in CACHE_DIRS}
    return json.dumps([side.python, side.start, r.framework, r.model, r.seed, dataclasses.asdict(r.budget), s.device,
                       s.threads, s.precision == "fp64", environ], sort_keys=True, default=str)


def merged(parts: list[Trial], sides: int, stages: list[str]) -> Trial:
    """A trial's cell from its stages' parts, in the order they ran: each side's turn from the stage that served it;
    the bursts' order, wall time, meters and workers one after another; the first failure fails the cell."""
    out = Trial(parts[0].index, [Turn() for _ in range(sides)], stages=stages)
    for p in parts:
        for i, turn in enumerate(p.turns):
            if turn.ready is not None:
                out.turns[i] = turn
        out.order, out.wall_s, out.workers = out.order + p.order, out.wall_s + p.wall_s, out.workers + p.workers
        out.started, out.preparation = out.started + p.started, out.preparation + p.preparation
        out.meter = {k: out.meter.get(k, 0.0) + v for k, v in p.meter.items()}
        if out.failure is None and p.failure is not None:
            out.failure, out.failed_side, out.hung, out.stderr_tail = p.failure, p.failed_side, p.hung, p.stderr_tail
    return out

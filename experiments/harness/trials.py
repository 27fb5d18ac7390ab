"""What a paired comparison is made of and records, as typed data: its design, its sides (a variant each) and cells
(a point's op), and per trial and cell each side's turn (the worker, its op as prepared, every burst) with the
trial's log ratios. Parent side; saved as JSON (`<cell>/trial-<n>.json`) as each trial's cell ends."""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from experiments.common.config import PAIRED_DESIGNS
from experiments.common.job import Job
from experiments.common.protocol import Burst, Json, Point, Prepared, Ready, Request
from experiments.harness import manager
from experiments.measure.meter import oversubscription
from experiments.stats import outliers, ratios
from experiments.stats.looks import Looks

# Burst length, chosen with `python -m experiments.selfcheck.paired` (docs/evidence.md): A/A pairs of torch LeNet
# bs32 inference (one thread), 1.5 s of bursts per side per pair, other work using 1.3-1.5 of the 2 cores: the
# pairs' log ratios spread 3.4% (SD, 46 pairs) with 20 ms bursts, 4.8% (44) with 50 ms, 5.3% (28) with 100 ms and
# 5.2% (28) with 200 ms; a pair took 5.5 s against 4.2-4.5 s (each burst's stop and continue), still the most
# precision per second. Other programs' load comes and goes faster than 50 ms: a round's bursts share more of it.
BURST_S = 0.02
ROUNDS = 75  # bursts per side per trial and cell: 1.5 s of each side's samples
TRIALS = 6  # fresh trials per cell, at first
MAX_TRIALS = 12  # an unsettled cell gets more trials, up to this many
MIN_ROUNDS = 6  # where one call outlasts a burst, rounds give each side rounds × burst_s of samples, at least these
ORDERS = ("abba", "random")  # the sides' order within each round: rotating (AB, BA, AB, ...) or drawn at random
TRIAL = "trial-{}.json"  # each trial's cell, every burst's samples, in the cell's directory


@dataclass(frozen=True)
class Design(Json):
    """How the cells are compared: bursts, rounds, trials, order."""

    burst_s: float = BURST_S
    rounds: int = ROUNDS
    trials: int = TRIALS
    max_trials: int = MAX_TRIALS
    order: str = "abba"
    seed: int = 0  # of the random order
    paired_design: str = "auto"  # which sides share a worker and which workers alternate (harness/designs.py)

    def __post_init__(self):
        if self.order not in ORDERS:
            raise ValueError(f"order {self.order!r}: one of {', '.join(ORDERS)}")
        if self.paired_design not in PAIRED_DESIGNS:
            raise ValueError(f"paired_design {self.paired_design!r}: one of {', '.join(PAIRED_DESIGNS)}")
        if self.burst_s <= 0 or self.rounds < 1 or self.trials < 1 or self.max_trials < self.trials:
            raise ValueError(f"{self}: bursts and rounds must be positive, and max_trials at least trials")

    @property
    def looks(self) -> Looks:
        """When a cell's verdict is read: after `trials`, then after each more while it is unsettled."""
        return Looks(self.trials, self.max_trials)


@dataclass(frozen=True)
class Side:
    """One side of a comparison: what its workers run (framework, set-up, model, budget) and where (the interpreter,
    the allocator's and compile cache's environment, fork or spawn), as a job's workers would."""

    label: str  # for people: `framework=jax`, an environment's spec
    request: Request
    python: str
    environ: dict[str, str]
    start: str  # fork (from this side's fork server) or spawn
    timeout_s: float  # for each answer: the worker's start, an op's preparation, a burst

    @classmethod
    def of(cls, job: Job, label: str, cache: Path | None = None, peaks: Path | None = None) -> "Side":
        """A checked job's side; `cache`: its compile cache (a later trial's workers load what the first compiled);
        `peaks`: the sweep's cache of calibrated peaks."""
        c = job.config
        return cls(label, job.request(peaks), job.python, manager.environ(str(c.runtime.allocator), cache),
                   job.start, c.bench.timeout_s)


@dataclass(frozen=True)
class Cell(Json):
    """One point's op: what the sides take turns on."""

    batch_size: int
    op: str

    @property
    def name(self) -> str:
        return f"bs{self.batch_size}-{self.op}"


def cells_of(points: tuple[Point, ...] | list[Point]) -> list[Cell]:
    """The cells of the points, in their order (a point's ops one after another)."""
    return [Cell(p.batch_size, op) for p in points for op in p.ops]


@dataclass
class Turn(Json):
    """One side's worker in one trial on one cell: the worker, the op as it prepared it, every burst it timed."""

    ready: Ready | None = None
    prepared: Prepared | None = None
    bursts: list[Burst] = field(default_factory=list)
    layout: int = 0  # where in memory the op's buffers landed (drawn: harness/pairs.py; measure/worker.py: shifted)

    @property
    def ok(self) -> bool:
        return self.prepared is not None and self.prepared.status == "ok" and bool(self.bursts)

    @property
    def skipped(self) -> str | None:
        """Why the op can't run on this side (its worker said so when it prepared it); None: it can."""
        p = self.prepared
        return p.reason if p is not None and p.status != "ok" else None

    def oversubscribed(self, framework: str, other_cores: float) -> str | None:
        """Where this side's intra-op threads outnumbered the cores other processes left free: why, what to set."""
        r = self.ready
        if r is None or not r.cores or not self.bursts:
            return None
        return oversubscription(framework, r.threads, r.cores, other_cores,
                                int(r.machine.get("cpu_count_logical", r.cores)))


@dataclass
class Lifetime(Json):
    """A worker of a trial: the sides it served (their letters), its pid, the stage it ran in (workers of different
    stages never live at once) and when it started and was reaped (epoch seconds; None: alive when the trial's cell
    was saved)."""

    sides: str
    pid: int
    stage: int
    started: float
    ended: float | None = None


@dataclass
class Trial(Json):
    """One fresh worker per side on one cell (or one serving several sides): each side's turn, and the order the
    bursts ran in."""

    index: int
    turns: list[Turn]
    order: str = ""  # the sides' letters in the order their bursts ran: ABBAAB...
    paired_design: str = "bursts"  # how the sides took turns (harness/designs.py): `bursts+in-process` where mixed
    stages: list[str] = field(default_factory=list)  # alternating: each stage's workers (their sides), in turn
    workers: list[Lifetime] = field(default_factory=list)  # the workers that served the cell
    started: str = ""  # ... in the order their workers started (drawn per trial: harness/pairs.py)
    preparation: str = ""  # ... in the order they prepared the cell (drawn per trial and cell)
    wall_s: float = 0.0  # the cell's time in this trial: preparations, bursts, stops
    failure: str | None = None  # a crash, a hang, a worker that never connected: the trial's cell is left out
    failed_side: int | None = None  # whose worker it was
    hung: bool = False  # the failure was a silence (no answer, no connection within bench.timeout_s), not a crash
    stderr_tail: str = ""
    meter: dict[str, float] = field(default_factory=dict)  # the parent's `meter()` change over the rounds

    def background_cores(self) -> float | None:
        """Other processes' CPU use over the cell's rounds, in cores: the machine's busy time less this trial's
        workers' (each one's whole CPU time: its bursts, and answering the parent between them) and the parent's own,
        which drives them between bursts. Read once over the rounds, not per burst: the kernel counts idle time in
        10 ms ticks, ±0.5 core per 20 ms burst. None where the machine hides its busy time (meter.cpu_times)."""
        m = self.meter
        if not m or m["wall_s"] <= 0:
            return 0.0
        if "busy_cpu_s" not in m:
            return None
        return max(0.0, (m["busy_cpu_s"] - m["own_cpu_s"] - m["workers_cpu_s"]) / m["wall_s"])

    def log_ratio(self, side: int, base: int) -> float | None:
        """log(side/base): the median of the rounds' log ratios; None where either side has no bursts."""
        if self.failure is not None or not (self.turns[base].ok and self.turns[side].ok):
            return None
        a, b = self.turns[base], self.turns[side]
        return ratios.pair_log_ratio([x.samples_s for x in a.bursts], [x.samples_s for x in b.bursts])

    def log_ratio_se(self, side: int, base: int) -> float:
        """How far `log_ratio` could read from this trial's rounds alone (`ratios.pair_log_ratio_se`); 0 where it has
        none."""
        if self.log_ratio(side, base) is None:
            return 0.0
        a, b = self.turns[base], self.turns[side]
        return ratios.pair_log_ratio_se([x.samples_s for x in a.bursts], [x.samples_s for x in b.bursts])


@dataclass
class Compared(Json):
    """One cell over its trials (every burst's samples kept)."""

    cell: Cell
    trials: list[Trial] = field(default_factory=list)

    def used(self, side: int, base: int) -> list[Trial]:
        """The trials that judge `side` against `base`: both measured, and none set aside (`set_aside`)."""
        aside = {id(t) for t, _ in self.set_aside(side, base)}
        return [t for t in self.measured_both(side, base) if id(t) not in aside]

    def set_aside(self, side: int, base: int) -> list[tuple[Trial, str]]:
        """The trials whose ratio lies far off the others' while another program ran (`outliers.far_trials`), with why:
        kept on disk, left out of the judgement; the cell's next trials take their place."""
        both = self.measured_both(side, base)
        far = outliers.far_trials([t.log_ratio(side, base) for t in both], [t.background_cores() or 0.0 for t in both])
        return [(both[i], why) for i, why in far]

    def measured_both(self, side: int, base: int) -> list[Trial]:
        return [t for t in self.trials if t.log_ratio(side, base) is not None]

    def log_ratios(self, side: int, base: int) -> list[float]:
        return [t.log_ratio(side, base) for t in self.used(side, base)]

    def floor(self, side: int, base: int) -> float:
        """The least spread its trials' log ratios can have: the median over its trials of what each one's rounds
        alone leave uncertain (`Trial.log_ratio_se`); 0 without trials."""
        ses = [t.log_ratio_se(side, base) for t in self.used(side, base)]
        return float(np.median(ses)) if ses else 0.0

    def skipped(self, side: int) -> str | None:
        """Why the op can't run on `side`, if its worker said so."""
        return next((why for t in self.trials if t.turns and (why := t.turns[side].skipped)), None)

    def failed(self) -> set[int | None]:
        """The sides out of this cell (None: a side unknown): their worker crashed there (a signal, an OOM kill, an
        exception), or hung there twice. A hang gets a fresh worker once: it may be the machine's (on a TPU v5e,
        XLA's compiler hung at random in a few of the programs it compiled) where a crash is the program's."""
        hangs = Counter(t.failed_side for t in self.trials if t.failure is not None and t.hung)
        return {t.failed_side for t in self.trials
                if t.failure is not None and (not t.hung or hangs[t.failed_side] > 1)}

    def retried(self, trial: Trial) -> bool:
        """Whether the trial's failure is a first hang, whose side a fresh worker measures again (`failed`)."""
        return trial.failure is not None and trial.hung and trial.failed_side not in self.failed()

    def done(self, sides: int) -> bool:
        """Whether no side is left to measure it: every side's worker failed on it."""
        failed = self.failed()
        return None in failed or len(failed) >= sides

    def measured(self) -> int:
        """Its trials that no worker failed in: a failed trial measured nothing for the sides left."""
        return sum(t.failure is None for t in self.trials)


def letter(i: int) -> str:
    return chr(ord("A") + i)

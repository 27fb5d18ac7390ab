"""Whether the paired verdicts keep their promise on this machine: `nnbench calibrate --paired [--repeats N]
[OVERRIDES]`. Parent side.

Each repeat runs five paired sweeps as `nnbench ab` runs them, at the bench preset's design (the OVERRIDES are added
to each, e.g. bench=thorough):

- A/A on the README's cells: this interpreter under two names (two one-line scripts that exec it),
  `runtime.python=A,B framework=jax,torch model=lenet`: each framework against itself on its six cells;
- the same with the names the other way round (`runtime.python=B,A`);
- A/A on torch alone, `framework=torch model=mlp_relu 'ops=[inference]' batch_size=8,32,128,512`, both ways round;
- a planted 5%: nnbench-planted 1.0 against 1.0.5 (`model=planted`, selfcheck/planted.py: the step does 5% more
  matmuls, Adam's update included) in two environments built offline, jax and torch, inference and training at
  bs32.

Then over every cell: A/A called slower or faster (the false alarms), the A/A interval holding 1 (coverage), the
mean A/A log ratio of the second side over the first in each order (the position bias), and the planted 5% found
slower; each rate with its exact (Clopper-Pearson) 95% interval, and per sweep what the machine check and the trials'
`background_cores` said. One line says whether this machine meets the promise (`PROMISE`); exit 1 where it doesn't.
"""
from __future__ import annotations

import math
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from experiments.common.child import run_to_end
from experiments.harness.trials import TRIAL, Trial
from experiments.stats.geomean import Evidence
from experiments.stats.verdicts import Verdict, rate
from experiments.store.sweepdir import Sweep
from experiments.sweep.paired_engine import Answer

# The promise (docs/comparing.md#the-promise), over many cells of the default bench: at most 5% of A/A cells called
# slower or faster, their interval holding 1 in at least 93%, the mean A/A log ratio within ±0.5% whichever side
# goes first, and a planted 5% found slower in at least 90% of its cells.
PROMISE = {"alarms": 0.05, "coverage": 0.93, "bias": 0.005, "found": 0.90}
README_AA = ("framework=jax,torch", "model=lenet")
TORCH_AA = ("framework=torch", "model=mlp_relu", "ops=[inference]", "batch_size=8,32,128,512")
PLANTED = {"1.0": 1.0, "1.0.5": 1.05}  # nnbench-planted's version: the work of its step
PLANTED_CELLS = ("model=planted", "framework=jax,torch", "batch_size=32", "ops=[inference,training]")
# what every sweep of the calibration leaves out: A/A and planted sides are one framework against itself
QUIET = ("parity=false",)


@dataclass(frozen=True)
class Case:
    """One paired sweep of the calibration: its name, its overrides, and whether its cells are A/A."""

    name: str
    overrides: tuple[str, ...]
    aa: bool


@dataclass(frozen=True)
class Run:
    """What one sweep of a case said: its cells' verdicts, the machine as the sweep found it, its wall time."""

    case: Case
    cells: list[Evidence]
    check: str  # the machine check's line at the sweep's start
    background: list[float]  # other processes' CPU use over each trial's rounds, in cores
    wall_s: float

    def line(self) -> str:
        bg = f"median {statistics.median(self.background):.2f}, at most {max(self.background):.2f}" \
            if self.background else "none read"
        return (f"{self.case.name}: {len(self.cells)} cells in {self.wall_s:.0f} s; {self.check}; the trials' other "
                f"processes: {bg} cores")


def names(workdir: Path) -> tuple[str, str]:
    """Two names for this interpreter: one-line scripts that exec it, so that an A/A's sides differ in nothing."""
    out = []
    for name in ("a", "b"):
        script = workdir / f"python-{name}"
        script.write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
        script.chmod(0o755)
        out.append(str(script))
    return out[0], out[1]


def cases(a: str, b: str, planted: tuple[str, str], overrides: list[str]) -> list[Case]:
    """One repeat's sweeps, A/A both ways round (README cells, torch alone), then the planted 5%."""
    out = []
    for name, cells in (("README cells", README_AA), ("torch mlp_relu", TORCH_AA)):
        for first, second, order in ((a, b, "A,B"), (b, a, "B,A")):
            out.append(Case(f"A/A {name} ({order})", (f"runtime.python={first},{second}", *cells), True))
    out.append(Case("planted 5%", (f"runtime.python={planted[0]},{planted[1]}", *PLANTED_CELLS), False))
    return [Case(c.name, (*c.overrides, *QUIET, *overrides, "report.along=runtime.python"), c.aa) for c in out]


def measure(case: Case, directory: Path, uri: str) -> Run:
    """One case's sweep, as `nnbench ab` runs it (the sweep in a child process), and what it said."""
    t0 = time.perf_counter()
    run_to_end([sys.executable, "-m", "experiments.run", "-m", *case.overrides, f"hydra.sweep.dir={directory}",
                f"mlflow.tracking_uri={uri}", "mlflow.experiment_name=nnbench-calibrate"])
    sweep = Sweep(directory)
    machine = sweep.read().machine if sweep.state.exists() else None
    trials = [Trial.from_json(p.read_text()) for p in directory.glob(f"**/trials/*/{TRIAL.format('*')}")]
    return Run(case, Answer.read_all(directory), machine.line() if machine else "no machine check",
               [t.background_cores() for t in trials if t.failure is None], time.perf_counter() - t0)


def ratio(cell: Evidence) -> float:
    """The cell's B/A: the geometric mean of its trials' ratios."""
    return math.exp(float(np.mean(cell.log_ratios)))


def bias(cells: list[Evidence]) -> tuple[float, float]:
    """The mean log ratio of the second side over the first across A/A cells, and its 95% half-width (Student's t
    over the cells; cells measured in the same trials share their trials' luck, so it is narrower than it ought)."""
    logs = [math.log(ratio(c)) for c in cells if c.log_ratios]
    if len(logs) < 2:
        return (logs[0] if logs else math.nan), math.nan
    from scipy.special import stdtrit  # scipy takes most of a second to import: only once the sweeps have run

    return float(np.mean(logs)), float(stdtrit(len(logs) - 1, 0.975) * np.std(logs, ddof=1) / math.sqrt(len(logs)))


def verdicts(runs: list[Run]) -> tuple[list[str], bool]:
    """The rates over every run's cells, each with its interval, and the line that says whether the promise holds."""
    aa = [c for r in runs if r.case.aa for c in r.cells]
    planted = [c for r in runs if not r.case.aa for c in r.cells]
    alarms = sum(c.verdict.changed for c in aa)
    held = sum(c.judged is not None and c.judged.ci_low <= 1 <= c.judged.ci_high for c in aa)
    found = sum(c.verdict == Verdict.SLOWER for c in planted)
    orders = {order: bias([c for r in runs if r.case.aa and r.case.name.endswith(f"({order})") for c in r.cells])
              for order in ("A,B", "B,A")}
    out = [f"A/A slower or faster: {rate(alarms, len(aa))} (promise: at most {PROMISE['alarms']:.0%})",
           f"A/A interval holding 1: {rate(held, len(aa))} (promise: at least {PROMISE['coverage']:.0%})"]
    out += [f"A/A mean log ratio, second side over first, {order}: {m:+.2%} ± {h:.2%} (promise: within "
            f"±{PROMISE['bias']:.1%})" for order, (m, h) in orders.items()]
    out.append(f"planted 5% found slower: {rate(found, len(planted))} (promise: at least {PROMISE['found']:.0%})")
    met = bool(aa and planted) and alarms <= PROMISE["alarms"] * len(aa) and held >= PROMISE["coverage"] * len(aa) \
        and all(abs(m) <= PROMISE["bias"] for m, _ in orders.values()) and found >= PROMISE["found"] * len(planted)
    out.append(f"this machine {'meets' if met else 'does not meet'} the paired verdicts' promise over {len(aa)} A/A "
               f"and {len(planted)} planted cells")
    return out, met


def calibrate(repeats: int, overrides: list[str], workdir: Path, uri: str) -> bool:
    """`repeats` rounds of the cases, one sweep after another, each sweep's machine said as it ends; the rates."""
    from experiments.selfcheck import planted as plant  # the environments' builder: only for this calibration

    built = plant.environments(workdir, PLANTED)
    runs = []
    for i in range(repeats):
        for j, case in enumerate(cases(*names(workdir), (str(built[0].python), str(built[1].python)), overrides)):
            runs.append(measure(case, workdir / f"sweep-{i}-{j}", uri))
            print(f"  {i + 1}/{repeats} {runs[-1].line()}", flush=True)
    lines, met = verdicts(runs)
    print("\n" + "\n".join(lines))
    return met

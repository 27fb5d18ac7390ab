"""A paired comparison along one axis: `nnbench ab AXIS=A,B`, `versions` and `bisect` run the paired sweep with
`report.along=AXIS` (each value against the one before it, on one machine, the variants taking turns in bursts of
warm workers) as a child process, then read its verdicts back from the sweep dir as typed rows. Parent side.

The rows' JSON (`as_json`) is versioned by SCHEMA: a change that renames or retypes a field is a new version.
"""
from __future__ import annotations

import difflib
import json
import math
import os
import signal
import sys
from dataclasses import asdict, dataclass, fields
from functools import partial
from pathlib import Path

from experiments.common.child import run_to_end
from experiments.common.config import ROOT, Config
from experiments.common.errors import BadInput
from experiments.stats.paired import COLUMNS, PAIRED, PairedComparison
from experiments.stats.verdicts import Verdict
from experiments.report.profile_change import ProfileChange
from experiments.store.sweepdir import MARKER
from experiments.sweep import changes, paired_engine

STOPPED = (128 + signal.SIGINT, 128 + signal.SIGTERM)  # a sweep's exit codes where a signal stopped it
SCHEMA = "nnbench.paired/1"  # the JSON of `as_json`: docs/comparing.md#the-json


class Stopped(KeyboardInterrupt):
    """A paired sweep stopped by a signal (its exit code one of STOPPED), raised where its caller must stop too (a
    bisect's step): the sweep said so in its one line and closed its runs, so the command adds nothing. A
    KeyboardInterrupt, so that a parent run around it ends KILLED (store.parent)."""


@dataclass(frozen=True)
class Design:
    """The paired design a command's flags set (None: the bench preset's), as the sweep's overrides."""

    pairs: int | None = None  # bench.processes: fresh trials per cell at first
    max_pairs: int | None = None  # bench.max_processes
    bursts: int | None = None  # bench.rounds
    burst_ms: float | None = None  # bench.burst_s, in ms
    threshold: float | None = None  # report.threshold
    alpha: float | None = None  # report.alpha
    profile: bool | None = None  # report.profile_changed: both sides of each changed cell profiled

    def __post_init__(self):
        checks = [(self.pairs is None or self.pairs >= 2, f"--pairs {self.pairs}: at least 2 (one pair gives no "
                                                          "verdict), e.g. --pairs 6"),
                  (self.max_pairs is None or self.max_pairs >= (self.pairs or 2),
                   f"--max-pairs {self.max_pairs} is below --pairs {self.pairs or 2}: e.g. --max-pairs 12"),
                  (self.bursts is None or self.bursts >= 1, f"--bursts {self.bursts}: at least 1, e.g. --bursts 25"),
                  (self.burst_ms is None or (math.isfinite(self.burst_ms) and self.burst_ms > 0),
                   f"--burst-ms {self.burst_ms}: a positive length, e.g. --burst-ms 20")]
        for ok, message in checks:
            if not ok:
                raise BadInput(message)

    def fits(self, jobs: list) -> None:
        """BadInput where --max-pairs (without --pairs) is below the pairs the sweep starts with: its bench preset's
        (bench.processes), which the flags' own check can't see."""
        first = max((j.config.bench.processes for j in jobs), default=0)
        if self.pairs is None and self.max_pairs is not None and self.max_pairs < first:
            raise BadInput(f"--max-pairs {self.max_pairs} is below --pairs {first} (bench.processes of the bench "
                           f"preset): e.g. --max-pairs {2 * first}, or --pairs {self.max_pairs}")

    def overrides(self) -> list[str]:
        keys = (("bench.processes", self.pairs), ("bench.max_processes", self.max_pairs), ("bench.rounds", self.bursts),
                ("bench.burst_s", None if self.burst_ms is None else self.burst_ms / 1e3),
                ("report.threshold", self.threshold), ("report.alpha", self.alpha))
        given = [(k, v) for k, v in keys if v is not None]
        if self.pairs is not None and self.max_pairs is None:  # a preset's max below the pairs asked for
            given.append(("bench.max_processes", max(self.pairs, 2 * self.pairs)))
        if self.profile is not None:
            given.append(("report.profile_changed", str(self.profile).lower()))
        return [f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in given]


@dataclass(frozen=True)
class CellVerdict:
    """One cell of a paired comparison: a variant against the one before it along the axis."""

    model: str
    op: str
    batch_size: int
    variant: str  # B: its label in the sweep
    baseline: str  # A
    judged: PairedComparison  # B's time over A's, its interval and the verdict on it
    run_id: str | None  # B's point run
    differs: str  # what differs between A and B besides the axis
    repro: str  # the command that measures just this cell again
    profile: ProfileChange | None = None  # where the time went: B's profile against A's (report.profile_changed)

    @property
    def verdict(self) -> Verdict:
        return self.judged.verdict

    @property
    def trials(self) -> int:
        return self.judged.pairs

    @property
    def ratio(self) -> float:
        """B's time over A's: above 1, B is slower."""
        return self.judged.ratio

    def interval(self) -> tuple[float | None, float | None]:
        """The ratio's interval, the one the verdict used (None: one trial)."""
        return tuple(self.judged.as_json()["interval"])

    def as_json(self) -> dict:
        """The cell as `--json` prints it (SCHEMA)."""
        cell = {k: getattr(self, k) for k in ("model", "op", "batch_size", "variant", "baseline")}
        return cell | self.judged.as_json() | {"run_id": self.run_id, "differs": self.differs, "repro": self.repro,
                                               "profile": self.profile and asdict(self.profile) | {
                                                   "said": self.profile.said()}}


def axis(text: str) -> tuple[str, list[str]]:
    """`key=A,B,...` as the key and its values, parsed as Hydra parses a sweep override; BadInput naming the fix
    where it is not one, or not something a cell's variants can span."""
    from hydra.core.override_parser.overrides_parser import OverridesParser  # Hydra: only for these commands

    try:
        (override,) = OverridesParser.create().parse_overrides([text])
        values = list(override.sweep_string_iterator()) if override.is_sweep_override() else []
    except Exception as e:  # Hydra's own parse errors
        raise BadInput(f"{text!r} is not AXIS=A,B ({str(e).splitlines()[0]}): e.g. framework.compile=true,false")
    key = override.get_key_element()
    if len(values) < 2:  # not a sweep: the one value the override sets
        raise BadInput(f"{text!r} gives one value: a paired comparison needs two or more, e.g. {key}=A,B")
    known = sorted(f.name for f in fields(Config))
    if (root := key.split(".")[0]) not in known:  # a typo, caught before any sweep starts
        near = difflib.get_close_matches(root, known, n=1)
        raise BadInput(f"{root} is not a key of the config{f' (did you mean {near[0]}?)' if near else ''}: "
                       f"e.g. framework=jax,torch or framework.compile=true,false")
    if not paired_engine.spans(key):
        raise BadInput(f"{key} fixes a cell, so its values can't be paired: compare values of "
                       f"{', '.join(paired_engine.VARIANT_KEYS)} (e.g. framework.compile=true,false), or sweep "
                       f"{key} with python -m experiments.run -m")
    return key, values


def check(argv: list[str], key: str, design: Design) -> list:
    """The sweep's jobs, through the sweep's own door (composed, checked, probed); BadInput naming the fix, also
    for a runner that times itself (framework=external: it can't take turns) and for a `design` that doesn't fit
    them, found before the probes."""
    from experiments.common.config import register  # Hydra and the door: only for these commands
    from experiments.sweep import commandline

    register(commandline.pythons(argv))  # networks of the environments compared
    if key in {o.lstrip("+~").split("=", 1)[0] for o in argv[1:]}:
        raise BadInput(f"{key} is the axis compared: set it only once")
    checked = commandline.explained(["-m", *argv], partial(fitted, design))
    if checked is None or checked.jobs is None:
        raise BadInput("a paired comparison runs the basic sweeper's jobs: drop hydra/sweeper and the print flags")
    return checked.jobs


def fitted(design: Design, jobs: list) -> None:
    if any(not paired_engine.paired(j) for j in jobs):
        raise BadInput("framework=external can't be paired: its runner times itself, so its bursts can't be "
                       "interleaved with another worker's; compare it unpaired (python -m experiments.run -m ...)")
    design.fits(jobs)


def sweep(overrides: list[str], directory: Path, uri: str, experiment: str, parent: str | None = None,
          quiet: bool = False) -> int:
    """The paired sweep, in a child process, its dir `directory`; its exit code: 128 + the signal where an interrupt
    stopped it (passed on to it: it kept what it measured, closed its runs and said so in its one line, so the
    command has nothing to add; STOPPED). Its lines go to this terminal (`quiet`: to stderr)."""
    from experiments.sweep import preflight  # the door: only for these commands

    argv = [sys.executable, "-m", "experiments.run", "-m", *overrides, f"hydra.sweep.dir={directory}",
            f"mlflow.tracking_uri={uri}", f"mlflow.experiment_name={experiment}",
            *([f"mlflow.parent_run_id={parent}"] if parent else [])]
    environ = os.environ | {"PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
                            preflight.FOUND: preflight.found()}  # what this command's door found: not asked again
    try:
        return run_to_end(argv, env=environ, stdout=sys.stderr if quiet else None).returncode
    except KeyboardInterrupt as e:  # raised once the sweep, which had it passed on, has ended
        return 128 + getattr(e, "signum", signal.SIGINT)


def verdicts(directory: Path) -> list[CellVerdict]:
    """Every paired comparison the sweep under `directory` judged, from its points' records (a variant against the
    one before it; a baseline's own points hold none)."""
    out = []
    loaded = changes.points(directory)
    bases = changes.bases(loaded)
    for d, rec in loaded.items():
        t, m = rec.tags, rec.metrics
        if t.get("design") != "paired" or t.get("paired_baseline") == "true":
            continue
        run_id = (d / MARKER).read_text().strip() if (d / MARKER).exists() else None
        for op in (o for o in rec.params["ops"].split(",") if f"{o}_verdict" in t):
            judged = PairedComparison.read(t[f"{op}_verdict"], {k: m[f"{op}_{k}"] for k in PAIRED if f"{op}_{k}" in m})
            out.append(CellVerdict(rec.params["model"], op, int(rec.params["batch_size"]), t["variant"],
                                   t["compared_with"], judged, run_id, t.get("differs", ""), t.get(f"{op}_repro", ""),
                                   changes.change(bases.get(d), d, op)))
    return sorted(out, key=lambda r: (r.model, r.variant, r.batch_size, r.op))


def markdown(rows: list[CellVerdict], title: str, threshold: float) -> str:
    """A short Markdown report for a CI job summary or a PR comment: only the cells judged slower or faster, each
    with its ratio, interval, the smallest change it could have seen and the command that measures it again; one
    line for the rest."""
    changed = [r for r in rows if r.verdict.changed]
    out = [f"### {title}", ""]
    if changed:
        out += ["| cell | B / A | B/A | 95% interval | verdict | smallest change seen |", "|---|---|---|---|---|---|"]
        for r in changed:
            seen = r.judged.mde - 1  # the MDE: the smallest slowdown its trials could have called slower
            out.append(f"| {r.model} {r.op} bs{r.batch_size} | {r.variant} / {r.baseline} | {r.ratio:.3f} | "
                       "[{:.3f}, {:.3f}] | ".format(*r.interval()) + f"**{r.verdict}** | "
                       + (f"{seen:.1%}" if seen == seen else "") + " |")
        out += ["", "Measure a cell again:", ""] + [f"- {r.model} {r.op} bs{r.batch_size}: `{r.repro}`"
                                                    for r in changed if r.repro]
        if said := where(changed, "- "):
            out += ["", "Where the time went (both sides profiled, B against A):", "", *said]
    rest = {}
    for r in rows:
        if not r.verdict.changed:
            rest[str(r.verdict)] = rest.get(str(r.verdict), 0) + 1
    said = ", ".join(f"{n} {v}" for v, n in rest.items())
    out += ["", f"{len(changed) or 'None'} of {len(rows)} cells changed beyond ±{threshold:.0%}"
            + (f"; the rest: {said}" if said else "") + " (paired: each B against its A on one machine)."]
    return "\n".join(out) + "\n"


def slower(rows: list[CellVerdict]) -> list[str]:
    """The cells judged slower, one phrase each: `lenet inference bs32 torch-eager fp32 over jax-jit fp32 1.51×
    [1.47, 1.55]`."""
    return [f"{r.model} {r.op} bs{r.batch_size} {r.variant} over {r.baseline} {r.ratio:.3f}× "
            f"[{r.interval()[0]:.3f}, {r.interval()[1]:.3f}]" for r in rows if r.verdict == Verdict.SLOWER]


def table(rows: list[CellVerdict]) -> str:
    """The verdicts as a Markdown table: B/A (above 1: B slower), its interval, the verdict, the trials."""
    from tabulate import tabulate  # only once measured

    body = [[r.model, r.op, r.batch_size, *apart(r.variant, r.baseline), *r.judged.cells()] for r in rows]
    text = "paired: each B over its A (above 1: B is slower)\n" + tabulate(
        body, ["model", "op", "batch", "variant", "B / A", *COLUMNS], tablefmt="github")
    said = where(rows, "  ")
    return text + ("\n\nwhere the time went, B's profile against A's:\n" + "\n".join(said) if said else "")


def where(rows: list[CellVerdict], bullet: str) -> list[str]:
    """The profiled cells' changes, one line each."""
    return [f"{bullet}{r.model} {r.op} bs{r.batch_size} {' '.join(apart(r.variant, r.baseline))}: {r.profile.said()}"
            f" (the two profiles took {r.profile.cost_s:.2g} s in their workers)" for r in rows if r.profile]


def apart(b: str, a: str) -> tuple[str, str]:
    """What two labels share (`torch-eager fp32`), and how B and A differ (`runtime.python=jax==0.10.2 / jax==0.10.1`,
    `jax-jit fp32 / torch-eager fp32`)."""
    wb, wa = b.split(" "), a.split(" ")
    n = next((i for i, (x, y) in enumerate(zip(wb, wa)) if x != y), min(len(wb), len(wa)))
    key = wb[n].split("=", 1)[0] + "=" if n < len(wb) and n < len(wa) and "=" in wb[n] else ""
    rest_a = " ".join(wa[n:])
    return " ".join(wb[:n]), f"{' '.join(wb[n:])} / {rest_a.removeprefix(key)}"


def answer(rows: list[CellVerdict], **about) -> dict:
    """The verdicts as one object: `schema` (SCHEMA), what was compared (`about`), and one object per cell."""
    return {"schema": SCHEMA, **about, "cells": [r.as_json() for r in rows]}


def as_json(rows: list[CellVerdict], **about) -> str:
    """`answer` as --json prints it."""
    return json.dumps(answer(rows, **about), indent=1)

"""Are the intervals and the verdicts as good as they claim? `nnbench calibrate [OVERRIDES] [--repeats N] [--planted]`

Runs a sweep (the README sweep unless overrides are given) `--repeats` times as replicates (`repeat=0,1,...`, each a
separate set of fresh processes, interleaved) into a new store, or judges an existing sweep (`--sweep RUN_ID|last`),
then:

- re-run interval: for every point and ordered pair of replicates, whether one's median lies inside the other's
  95% interval (target >= 90%);
- A/A: replicates 0 and 1, 2 and 3, ... are the same environment measured twice; `nnbench history --by repeat` on
  each pair must say "no change" for at least 95% of the points, and the ratio's 95% interval must hold 1 as often;
- A/B, planted synthetically: the same pairs with the second replicate's process medians scaled by 1.1, 1.2 and 1.5;
  how often history finds the slowdown, and the smallest one it finds 90% of the time (the bench's minimal
  detectable effect on this machine);
- with --planted, A/B for real: nnbench-planted (selfcheck/planted.py) in five environments built offline, its op
  1.0 (twice), 1.1, 1.2 and 1.5 times slower, measured interleaved (`--repeats` rounds, LeNet's batch sizes as its
  points): A/A on the two unslowed versions, detection of each slowdown.

With --paired, the paired verdicts' promise on this machine, at the bench preset's design (selfcheck/promise.py):
`--repeats` rounds (default 2) of A/A sweeps on the README's cells and on torch mlp_relu inference, each with the
sides both ways round, and of a planted 5% (nnbench-planted 1.0 against 1.0.5, two environments built offline); the
A/A false alarms, the A/A interval holding 1, the position bias and the planted 5% found, each rate with its exact
(Clopper-Pearson) 95% interval, and one line that says whether the machine meets the promise. The OVERRIDES are added
to every sweep. Two rounds (64 A/A and 8 planted cells) take about 25 minutes on a quiet 2-core machine:

    python -m experiments calibrate --paired

Each rate comes with its exact (Clopper-Pearson) 95% binomial interval. Exit 1 when the A/A rate is below 95% (with
--paired: when the promise is not met).
"""
from __future__ import annotations

import argparse
import functools
import itertools
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from experiments.common.child import run_to_end
from experiments.common.config import README_SWEEP, register
from experiments.common.errors import LOST, OK, BadInput
from experiments.common.options import positive
from experiments.report import regressions
from experiments.report.tables import POINT, tidy
from experiments.stats.unpaired import process_medians, welch
from experiments.stats.verdicts import Verdict, rate
from experiments.store import tracking
from experiments.store.uris import readable, store_uri

FACTORS = (1.1, 1.2, 1.5)  # the planted slowdowns reported
MDE_GRID = np.round(np.arange(1.01, 2.001, 0.01), 2)  # slowdowns searched for the minimal detectable effect
DETECT = 0.9  # the detection rate that defines it
AA_TARGET = 0.95
PLANTED = {"1.0": 1.0, "1.0.1": 1.0, "1.1": 1.1, "1.2": 1.2, "1.5": 1.5}  # version: slowdown of its op


def coverage(t: pd.DataFrame) -> tuple[float, int, pd.DataFrame]:
    """(covered share, pairs, per-point table) over every ordered pair of replicates of each point."""
    rows = []
    for key, g in t.groupby(POINT, dropna=False):
        runs = list(g.itertuples())
        pairs = list(itertools.permutations(runs, 2))
        hits = sum(b.ci95_low_s <= a.median_s <= b.ci95_high_s for a, b in pairs)
        rows.append(dict(zip(POINT, key)) | {"runs": len(runs), "pairs": len(pairs), "covered": hits,
                                             "median_ms": g["median_s"].median() * 1e3,
                                             "spread": g["median_s"].max() / g["median_s"].min() - 1,
                                             "ci_half_width": ((g["ci95_high_s"] - g["ci95_low_s"]) / 2
                                                               / g["median_s"]).median()})
    table = pd.DataFrame(rows)
    pairs = int(table["pairs"].sum())
    return (table["covered"].sum() / pairs if pairs else float("nan")), pairs, table


def replicate_pairs(s: pd.DataFrame) -> list[pd.DataFrame]:
    """regressions.series along `repeat`, cut into pairs of replicates (0, 1), (2, 3), ...: independent A/A
    comparisons."""
    values = sorted(s["value"].unique(), key=int)
    return [s[s["value"].isin(values[i:i + 2])].assign(position=lambda d: d["value"].map(values[i:i + 2].index))
            for i in range(0, len(values) - 1, 2)]


def slowed(pair: pd.DataFrame, factor: float) -> pd.DataFrame:
    """The pair with its second replicate `factor` times slower: every process median scaled."""
    out = pair.copy()
    second = out["position"] == 1
    out.loc[second, "median_s"] *= factor
    out.loc[second, "process_medians_s"] = out.loc[second, "process_medians_s"].map(lambda ms: [m * factor for m in ms])
    return out


def found(pair: pd.DataFrame, verdicts: tuple[Verdict, ...]) -> tuple[int, int]:
    """(points with a change of these verdicts between the pair's two values, points), as history judges them."""
    r = regressions.regressions(pair)
    points = pair.groupby(POINT, dropna=False).ngroups
    return int(r["verdict"].isin(verdicts).sum()), points


def holds_one(pair: pd.DataFrame) -> int:
    """Points of an A/A pair whose ratio's 95% interval holds 1 (points measured on both sides)."""
    return sum(lo <= 1 <= hi for _, g in pair.groupby(POINT, dropna=False) if len(g) == 2
               for _, lo, hi, _ in [welch(*g.sort_values("position")["process_medians_s"])])


def aa_ab(pairs: list[pd.DataFrame], factors=FACTORS, mde: bool = True) -> dict:
    """A/A (no change, the interval holding 1) and synthetic A/B (detection per factor, the MDE) over the pairs."""
    same = [found(p, (Verdict.SLOWER, Verdict.FASTER)) for p in pairs]
    n = sum(m for _, m in same)
    held = sum(holds_one(p) for p in pairs)
    # each factor judged once
    hits = functools.cache(lambda f: sum(found(slowed(p, f), (Verdict.SLOWER,))[0] for p in pairs))
    out = {"n": n, "no_change": n - sum(k for k, _ in same), "interval_holds_1": held,
           "detected": {f: hits(f) for f in factors}}
    if mde:
        out["mde"] = next((f for f in MDE_GRID if hits(f) >= DETECT * n), None)
    return out


def lines(result: dict, what: str) -> list[str]:
    n = result["n"]
    out = [f"A/A ({what}): no change in {rate(result['no_change'], n)} (target >= {AA_TARGET:.0%}); the ratio's 95% "
           f"interval holds 1 in {rate(result['interval_holds_1'], n)}"]
    out += [f"A/B ({what}), {f - 1:.0%} slower: found in {rate(k, n)}" for f, k in result["detected"].items()]
    if "mde" in result:
        mde = result["mde"]
        out.append(f"minimal detectable effect ({what}): " + (f"{mde - 1:.0%} slower is found in >= {DETECT:.0%} of "
                   "comparisons" if mde else f"none up to 100% slower is found in {DETECT:.0%} of comparisons"))
    return out


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("overrides", nargs="*", metavar="key=value",
                   help=f"the sweep to repeat (default: {' '.join(README_SWEEP)})")
    p.add_argument("--repeats", type=positive("--repeats", "18", int, least=1, strict=False),
                   help="replicates of the sweep (default 18: 9 A/A pairs, 108 comparisons for the README sweep's 6 "
                        "cells of 2 variants); with --paired, rounds of its sweeps (default 2)")
    p.add_argument("--sweep", metavar="RUN_ID|last", help="judge the replicates of this stored sweep (its parent run "
                                                          "id, or last: the newest) instead")
    p.add_argument("--uri", help="the store (default: a new one in a temporary directory)")
    p.add_argument("--planted", action="store_true",
                   help="also A/A and A/B for real, on nnbench-planted in five environments (built offline)")
    p.add_argument("--paired", action="store_true",
                   help="the paired verdicts' promise instead: A/A false alarms, coverage and position bias on the "
                        "README's cells and on torch mlp_relu, and a planted 5%% found (--repeats rounds, default 2)")


def sweep(args: list[str], uri: str, workdir: Path) -> None:
    t0 = time.perf_counter()
    r = run_to_end([sys.executable, "-m", "experiments.run", "-m", *args, f"mlflow.tracking_uri={uri}"],
                   cwd=workdir)
    if r.returncode:
        raise BadInput(f"the sweep failed (exit {r.returncode}); its output is above")
    print(f"\n`{' '.join(args)}` in {time.perf_counter() - t0:.0f} s")


def last_sweep(uri: str) -> pd.DataFrame:
    store = tracking.Store(uri)
    parent = store.latest_sweep("nnbench").info.run_id
    return tidy(store.search("nnbench", f"tags.mlflow.parentRunId = '{parent}'"))


def series(t: pd.DataFrame, uri: str, by: str) -> pd.DataFrame:
    samples = {}

    def medians(run_id: str, op: str) -> list[float]:
        if run_id not in samples:
            samples[run_id] = tracking.Store(uri).load_samples(run_id)
        return process_medians(samples[run_id][op])

    return regressions.series(t, by, medians)


def run(a: argparse.Namespace) -> int:
    if a.paired:
        return promise_of(a)
    a.repeats = a.repeats or 18
    if a.repeats < 2:
        raise BadInput(f"--repeats {a.repeats} must be at least 2 (replicates pair up as A/A): e.g. --repeats 18")
    from experiments.sweep import commandline  # Hydra is slow to import: only to validate the overrides

    if a.sweep and a.overrides:
        raise BadInput("--sweep judges a stored sweep, the overrides run a new one: give one of them")
    if a.sweep:
        uri = readable(a.uri)
        try:
            store = tracking.Store(uri)
            t = tidy(store.search("nnbench", f"tags.mlflow.parentRunId = '{store.sweep_run_id('nnbench', a.sweep)}'"))
        except LookupError as e:
            raise BadInput(f"{e}: give --sweep RUN_ID or last, and --uri") from None
        if t.empty:
            raise BadInput(f"sweep {a.sweep} holds no measured point in {uri}: give another --sweep (RUN_ID or last)")
    workdir = Path(tempfile.mkdtemp(prefix="nnbench-calibrate-"))
    uri = store_uri(a.uri) if a.uri or a.sweep else f"sqlite:///{workdir}/mlruns/mlflow.db"
    rounds = f"repeat={','.join(map(str, range(a.repeats)))}"
    if not a.sweep:
        register()  # the sweep's door, before anything runs: a bad override is its one line
        commandline.explained(["-m", *(a.overrides or README_SWEEP), rounds, f"mlflow.tracking_uri={uri}"])
        sweep([*(a.overrides or README_SWEEP), rounds], uri, workdir)
        t = last_sweep(uri)
    share, pairs, table = coverage(t)
    print(table.assign(coverage=table["covered"] / table["pairs"]).to_markdown(index=False, floatfmt=".3g"))
    print(f"\nre-run interval: a run's median inside another run's 95% interval in {share:.1%} of {pairs} pairs "
          "(target >= 90%)")
    readme = aa_ab(replicate_pairs(series(t, uri, "repeat")))
    out = lines(readme, "this sweep")
    if a.planted:
        out += lines(planted(workdir, rounds), "nnbench-planted")
    print("\n".join(out))
    return OK if readme["n"] and readme["no_change"] >= AA_TARGET * readme["n"] else LOST


def planted(workdir: Path, rounds: str) -> dict:
    """A/A and A/B on nnbench-planted for real: five environments measured interleaved in one sweep."""
    from experiments.selfcheck import planted as plant  # its runner's command: only with --planted

    built = plant.environments(workdir, PLANTED)
    uri = f"sqlite:///{workdir}/planted/mlflow.db"
    sweep(["framework=external", "external.name=planted", f"external.command='{plant.COMMAND}'", "model=lenet",
           "ops=[inference,training]", rounds, "runtime.python=" + ",".join(f"'{e.python}'" for e in built)],
          uri, workdir)
    return by_version(uri, PLANTED)


def by_version(uri: str, versions: dict[str, float]) -> dict:
    """The last sweep judged unpaired round by round (`repeat`), the first version against each other: A/A where
    their slowdowns are equal, else how often it is found."""
    from experiments.measure.environment import version_key  # packaging: only with --planted
    from experiments.selfcheck import planted as plant  # the package's name: only with --planted

    t, by = last_sweep(uri), version_key(plant.PROJECT)
    by_round = [series(g, uri, by) for _, g in t.groupby("repeat")]  # each round: the environments in turn
    first, result = list(versions)[0], {"n": 0, "no_change": 0, "interval_holds_1": 0, "detected": {}}
    for version, factor in list(versions.items())[1:]:
        pairs = [s[s["value"].isin([first, version])].assign(position=lambda d: (d["value"] == version).astype(int))
                 for s in by_round]
        if factor == versions[first]:  # the same op in two environments: A/A
            aa = aa_ab(pairs, factors=(), mde=False)
            result |= {k: v for k, v in aa.items() if k != "detected"}
        else:
            result["detected"][factor] = sum(found(pair, (Verdict.SLOWER,))[0] for pair in pairs)
    return result


def promise_of(a: argparse.Namespace) -> int:
    """The paired verdicts' promise, measured here (selfcheck/promise.py)."""
    from experiments.selfcheck import promise  # the sweeps' reader: only with --paired
    from experiments.sweep import commandline  # as in run

    if a.sweep or a.planted:
        raise BadInput("with --paired: no --sweep or --planted (it runs its own sweeps): e.g. --paired --repeats 2")
    register()  # the sweep's door, before anything runs: a bad override is its one line
    commandline.explained(["-m", *promise.TORCH_AA, *a.overrides])
    workdir = Path(tempfile.mkdtemp(prefix="nnbench-calibrate-"))
    uri = store_uri(a.uri) if a.uri else f"sqlite:///{workdir}/mlruns/mlflow.db"
    return OK if promise.calibrate(a.repeats or 2, a.overrides, workdir, uri) else LOST

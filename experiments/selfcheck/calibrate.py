"""Does a point's 95% CI cover what the next run of the same point reads? `nnbench calibrate`

Runs a sweep (the README sweep unless overrides are given) `--repeats` times as replicates (`repeat=0,1,...`, each
a separate set of fresh processes) into a store, then, for every point and every ordered pair of replicates
(a, b), checks whether a's median lies inside b's CI. The share of pairs that do is the CI's coverage across
runs: what a user can expect when re-running a sweep. `--sweep ID` judges an existing sweep instead.
"""
from __future__ import annotations

import argparse
import itertools
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

from experiments.common.config import README_SWEEP
from experiments.common.errors import OK, BadInput
from experiments.report.tables import POINT, tidy
from experiments.store import tracking
from experiments.store.uris import store_uri


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


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("overrides", nargs="*", help=f"the sweep to repeat (default: {' '.join(README_SWEEP)})")
    p.add_argument("--repeats", type=int, default=4, help="replicates of the sweep (default %(default)s)")
    p.add_argument("--sweep", help="judge the replicates of this existing sweep (parent run id) instead")
    p.add_argument("--uri", help="the store (default: a new one in a temporary directory)")


def run(a: argparse.Namespace) -> int:
    workdir = Path(tempfile.mkdtemp(prefix="nnbench-calibrate-"))
    uri = store_uri(a.uri) if a.uri or a.sweep else f"sqlite:///{workdir}/mlruns/mlflow.db"
    parent = a.sweep
    if not parent:
        args = [*(a.overrides or README_SWEEP), f"repeat={','.join(map(str, range(a.repeats)))}",
                f"mlflow.tracking_uri={uri}"]
        t0 = time.perf_counter()
        r = subprocess.run([sys.executable, "-m", "experiments.run", "-m", *args], cwd=workdir)
        if r.returncode:
            raise BadInput(f"the sweep failed (exit {r.returncode}); its output is above")
        print(f"\n{a.repeats} replicates of `{' '.join(args[:-1])}` in {time.perf_counter() - t0:.0f} s")
        parents = tracking.search(uri, "nnbench", f"tags.`{tracking.SWEEP}` = 'true'")
        parent = parents.sort_values("start_time")["run_id"].iloc[-1]
    t = tidy(tracking.search(uri, "nnbench", f"tags.mlflow.parentRunId = '{parent}'"))
    share, pairs, table = coverage(t)
    view = table.assign(coverage=table["covered"] / table["pairs"])
    print(view.to_markdown(index=False, floatfmt=".3g"))
    print(f"\ncoverage: {share:.1%} of {pairs} pairs (a run's median inside another run's 95% interval; target >= 90%)")
    return OK

"""Compare stored runs: `nnbench compare model=lenet precision=fp32 [--out report/]`.

Prints the table (median, spread, interval, speedup against the baseline, MFU); with `--out` it writes report.md,
report.html, summary.csv and the plots. With `--by jax_version` (any tag or param, or run_date) it judges each
change of that value per point: ratio of medians with a bootstrap CI, a Mann-Whitney U p-value and a verdict.
With `--profile` it shows, for runs measured with profile=true, where one step's time goes per variant (ms per
category and overhead) and, per pair of variants, the part that differs most; `--out` adds the stacked bars.
"""
from __future__ import annotations

import argparse
from functools import cache
from pathlib import Path

from experiments.cli.common import add_selection, select
from experiments.common.config import DEFAULT_BASELINE
from experiments.common.errors import LOST, OK, BadInput


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_selection(p)
    p.add_argument("--baseline", default=DEFAULT_BASELINE, help="variant for speedups (default: %(default)s)")
    p.add_argument("--out", type=Path, help="write report.md, report.html, summary.csv and the PNGs here")
    p.add_argument("--by", help="judge changes across this tag or param: jax_version, torch_version, "
                                "nnbench_git_commit, env_fingerprint, run_date, ...")
    p.add_argument("--threshold", type=float, default=0.05, help="smallest change that counts (default 5%%)")
    p.add_argument("--alpha", type=float, default=0.05, help="significance level (default %(default)s)")
    p.add_argument("--fail-on-regression", action="store_true", help="exit 1 if any point is significantly slower")
    p.add_argument("--profile", action="store_true", help="where one step's time goes, per variant, for runs "
                                                          "measured with profile=true")


def run(a: argparse.Namespace) -> int:
    if a.profile and a.by:
        raise BadInput("--profile and --by answer different questions: drop one of them")
    t, uri, fs = select(a)
    if a.by:
        return by_version(a, t, uri, fs)
    from experiments.report import pages, tables  # matplotlib is slow to import: only once runs are selected

    if a.profile:
        b = tables.breakdown(t, a.baseline)
        if b.empty:
            raise BadInput(f"no profiled runs among the {t['run_id'].nunique()} selected: measure them with "
                           "profile=true (python -m experiments.run -m ... profile=true)")
        print(tables.breakdown_markdown(b) + "\n\n" + "\n".join(tables.differences(b)))
    else:
        print(tables.markdown(tables.summary(t, a.baseline)))
    if a.out:
        pages.write(t, a.out, a.baseline, title=f"nnbench: {fs or a.experiment}")
        print(f"\nreport: {a.out / 'report.md'}, {a.out / 'report.html'}")
    return OK


def process_samples(entry: dict) -> list[list[float]]:
    """An op's samples.json entry as one list of samples per worker process (older runs: one process)."""
    return [p["samples_s"] for p in entry["processes"]] if "processes" in entry else [entry["samples_s"]]


def by_version(a: argparse.Namespace, t, uri: str, fs: str) -> int:
    from experiments.report import changes, pages  # matplotlib and mlflow are slow to import: only once needed
    from experiments.store import tracking

    if a.by not in t.columns:
        known = sorted(c for c in t.columns if c.endswith(("_version", "_commit", "fingerprint", "_date")))
        raise BadInput(f"no tag or param {a.by!r} in the selected runs: use one of {', '.join(known)}")
    samples = cache(lambda run_id: tracking.load_samples(uri, run_id))
    c = changes.changes(t, a.by, lambda run_id, op: process_samples(samples(run_id)[op]), a.threshold, a.alpha)
    if c.empty:
        values = ", ".join(sorted(t[a.by].dropna().astype(str).unique())) or "none"
        raise BadInput(f"no point was measured with two values of {a.by} (values: {values})")
    print(changes.changes_markdown(c))
    if ((c["processes_old"] == 1) | (c["processes_new"] == 1)).any():
        print("\nnote: a side measured in a single process cannot show process-to-process drift, which can exceed "
              "the change; measure replicates interleaved, e.g. -m repeat=0,1,2,3,4 runtime.python=A,B "
              "(see docs/comparing.md)")
    counts = c["verdict"].value_counts()
    print(f"\n{len(c)} changes: " + ", ".join(f"{n} {v}" for v, n in counts.items())
          + f" (threshold {a.threshold:.0%}, alpha {a.alpha})")
    if a.out:
        pages.write_changes(t, c, a.by, a.out, title=f"nnbench: changes across {a.by} ({fs or a.experiment})")
        print(f"report: {a.out / 'report.md'}, {a.out / 'report.html'}")
    return LOST if a.fail_on_regression and counts.get("slower", 0) else OK

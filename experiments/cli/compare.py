"""Compare stored runs: `nnbench compare model=lenet precision=fp32 [--out report/]`.

Prints the table (median, spread, interval, speedup against the baseline, MFU); with `--out` it writes report.md,
report.html, summary.csv and the plots. With `--profile` it shows, for runs measured with profile=true, where
one step's time goes per variant (ms per category and overhead) and, per pair of variants, the part that differs
most; `--out` adds the stacked bars. Whether a point changed along a version, a date or a commit is
`nnbench history --by ...`.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from experiments.cli.selection import add_selection, select
from experiments.common.config import DEFAULT_BASELINE
from experiments.common.errors import OK, BadInput


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_selection(p)
    p.add_argument("--baseline", default=DEFAULT_BASELINE, help="variant for speedups (default: %(default)s)")
    p.add_argument("--out", type=Path, help="write report.md, report.html, summary.csv and the PNGs here")
    p.add_argument("--profile", action="store_true", help="where one step's time goes, per variant, for runs "
                                                          "measured with profile=true")


def run(a: argparse.Namespace) -> int:
    t, uri, fs = select(a)
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

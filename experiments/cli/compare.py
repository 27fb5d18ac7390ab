"""Compare stored runs: `nnbench compare model=lenet precision=fp32 [--out report/]`, or two sweeps point by point:
`nnbench compare --sweep A --sweep B`.

Prints the table (median, spread, interval, speedup against the baseline, MFU); with `--out` it writes report.md,
report.html, summary.csv and the plots. With `--profile` it shows, for runs measured with profile=true, where
one step's time goes per variant (ms per category and overhead) and, per pair of variants, the part that differs
most; `--out` adds the stacked bars. With two `--sweep`s (run ids, or last) it judges each point of the second
against the first, as `nnbench history` judges a step (Welch's t on the per-process medians, Benjamini-Hochberg
across the points), and `--fail-on-regression` exits 1 when a point is slower. Whether a point changed along a
version, a date or a commit is `nnbench history --by ...`. `--json` prints the table as JSON records instead.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from experiments.cli.selection import add_selection, select
from experiments.common.config import DEFAULT_BASELINE
from experiments.common.errors import LOST, OK, BadInput
from experiments.common.options import probability, threshold
from experiments.compare import history
from experiments.stats.verdicts import ALPHA, THRESHOLD
from experiments.store.select import sweep_id
from experiments.store.uris import readable


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_selection(p, sweep={"action": "append", "help": "a sweep's parent run id, or last (the newest sweep): its "
                            "points only; twice, for the second sweep's points judged against the first's"})
    p.add_argument("--baseline", help=f"variant for speedups, '<mode> <precision>' (default: {DEFAULT_BASELINE})")
    p.add_argument("--out", type=Path, help="write report.md, report.html, summary.csv and the PNGs here")
    p.add_argument("--profile", action="store_true", help="where one step's time goes, per variant, for runs "
                                                          "measured with profile=true")
    p.add_argument("--threshold", type=threshold, default=THRESHOLD, help="with two --sweep: the smallest change "
                   "that counts, a fraction or a percentage (default 0.05, i.e. 5%%)")
    p.add_argument("--fdr", type=probability("--fdr"), default=ALPHA,
                   help="with two --sweep: the false discovery rate across the points (default %(default)s)")
    p.add_argument("--fail-on-regression", action="store_true", help="with two --sweep: exit 1 when a point of the "
                                                                     "second is slower")
    p.add_argument("--json", action="store_true", help="print the table as JSON records (one per row), nothing else")


def run(a: argparse.Namespace) -> int:
    sweeps = a.sweep or []
    if len(sweeps) > 2:
        raise BadInput(f"--sweep is given {len(sweeps)} times: give one sweep, or two to compare them")
    if len(sweeps) == 2:
        return two_sweeps(a)
    if a.fail_on_regression:
        raise BadInput("--fail-on-regression judges two sweeps: give --sweep A --sweep B (run ids or last), or "
                       "use nnbench history --by ... --fail-on-regression")
    t, uri, fs = select(a, given=sweeps[0] if sweeps else None)
    from experiments.report import pages, tables  # matplotlib is slow to import: only once runs are selected

    variants = sorted(t["variant"].unique())
    if a.baseline is not None and a.baseline not in variants:
        near = [v for v in variants if v.startswith(a.baseline)] or variants
        raise BadInput(f"--baseline {a.baseline!r} is no variant of the selected runs: use one of "
                       + ", ".join(f"'{v}'" for v in near))
    if a.baseline is None and DEFAULT_BASELINE not in variants:  # the table still answers; the speedups can't
        print(f"nnbench compare: note: no {DEFAULT_BASELINE} runs selected, so no speedups: pass --baseline, one of "
              + ", ".join(f"'{v}'" for v in variants), file=sys.stderr)
    baseline = a.baseline or DEFAULT_BASELINE
    if a.profile:
        b = tables.breakdown(t, baseline)
        if b.empty:
            raise BadInput(f"no profiled runs among the {t['run_id'].nunique()} selected: measure them with "
                           "profile=true (python -m experiments.run -m ... profile=true)")
        print(b.to_json(orient="records", indent=1) if a.json else
              tables.breakdown_markdown(b) + "\n\n" + "\n".join(tables.differences(b)))
    else:
        s = tables.summary(t, baseline)
        print(s.to_json(orient="records", indent=1) if a.json else tables.markdown(s))
        if not a.json and "speedup_sure" in s and not s["speedup_sure"].fillna(True).all():
            print("\n(1.23×): a speedup in parentheses lies within both points' 95% intervals: not a sure difference")
    if a.out:
        pages.write(t, a.out, baseline, title=f"nnbench: {fs or a.experiment}")
        if not a.json:
            print(f"\nreport: {a.out / 'report.md'}, {a.out / 'report.html'}")
    return OK


def two_sweeps(a: argparse.Namespace) -> int:
    """Each point of the second sweep against the first: history's verdict along an axis of two values, 1 and 2."""
    uri = readable(a.uri)
    ids = [sweep_id(uri, a.experiment, s) for s in a.sweep]
    if ids[0] == ids[1]:
        raise BadInput(f"--sweep {a.sweep[0]} and --sweep {a.sweep[1]} are the same sweep twice ({ids[0]}): give two "
                       "sweeps, e.g. --sweep RUN_ID --sweep last")
    h = history.between([select(a, sweep=i)[0] for i in ids], ids, uri, a.threshold, a.fdr)
    r = h.regressions
    if a.json:
        print(r.assign(before=ids[0], after=ids[1]).to_json(orient="records", indent=1) if not r.empty else "[]")
    else:
        print(f"sweep 1 = {ids[0]}, sweep 2 = {ids[1]}\n" + history.report(h, a.threshold, a.fdr))
    return LOST if a.fail_on_regression and history.slower(h) else OK

"""Follow each point along an axis and find where it changed: `nnbench history --by jax_version [selection]`.

--by is any tag or param: jax_version, torch_version, run_date, nnbench_git_commit, env_spec, repeat, ... Each
point's runs are ordered along it (as versions where every value parses as one, else by when each value first
ran), the change points of each point's series are found (ruptures' Pelt on the log medians) and each is judged
from the per-process medians on either side of it (Welch's t, Benjamini-Hochberg across the points). It prints the
regressions table (point, where, before → after, ratio and interval, verdict) and each point's medians, and logs
them with a trend plot per model and op (steps marked) to a run `history <by> · <selection>` in the store; --out
writes the same files to a folder. --fail-on-regression exits 1 when a slower level starts at the newest value
(or at or after --since): what a scheduled job asks. Its verdicts are unpaired (runs measured at different
times), and say so under the table; `nnbench ab` and `nnbench versions --paired` compare paired. See
docs/comparing.md.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from experiments.cli.selection import add_selection, select
from experiments.common.errors import LOST, OK, BadInput
from experiments.common.options import probability, threshold
from experiments.compare import history
from experiments.stats.verdicts import ALPHA, THRESHOLD

AXES = "jax_version, torch_version, run_date, nnbench_git_commit, env_spec, repeat, ..."


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_selection(p)
    p.add_argument("--by", required=True, help=f"the axis, a tag or param: {AXES}")
    p.add_argument("--threshold", type=threshold, default=THRESHOLD,
                   help="smallest change that counts: a fraction or a percentage (default 0.05, i.e. 5%%)")
    p.add_argument("--fdr", type=probability("--fdr"), default=ALPHA,
                   help="false discovery rate across the points judged, Benjamini-Hochberg (default %(default)s)")
    p.add_argument("--since", help="with --fail-on-regression: a value of --by; a slower level starting at or after "
                                   "it fails (default: the newest value)")
    p.add_argument("--fail-on-regression", action="store_true",
                   help="exit 1 when a slower level starts at the newest value (or at or after --since)")
    p.add_argument("--out", type=Path, help="also write report.md, report.html, the CSVs and the plots here")
    p.add_argument("--json", action="store_true",
                   help="print the axis's values, the changes and each point's medians as one JSON object")


def run(a: argparse.Namespace) -> int:
    t, uri, fs = select(a)
    h = history.judged(t, a.by, uri, a.threshold, a.fdr)
    since = h.values[-1] if a.since is None else a.since
    if since not in h.values:
        raise BadInput(f"--since {since} is not a value of {a.by} in the selection: use one of {', '.join(h.values)}")
    print(history.as_json(h) if a.json else history.report(h, a.threshold, a.fdr))
    title = f"history {a.by} · {fs or a.experiment}"
    params = {"by": a.by, "selection": fs, "threshold": a.threshold, "fdr": a.fdr, "values": " ".join(h.values)}
    run_id = history.logged(h, title, uri, a.experiment, params, a.out)
    print(f"\nlogged as run {run_id} ({title}) in {uri}" + (f"; report: {a.out / 'report.md'}" if a.out else ""),
          file=sys.stderr if a.json else sys.stdout)
    return LOST if a.fail_on_regression and history.slower(h, since) else OK

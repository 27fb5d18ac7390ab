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
import tempfile
from functools import cache
from pathlib import Path

from experiments.cli.selection import add_selection, select
from experiments.common.errors import LOST, OK, BadInput
from experiments.common.options import probability, threshold
from experiments.measure.verdict import ALPHA, THRESHOLD, Verdict

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
    s, r, values = judged(t, a.by, uri, a.threshold, a.fdr)
    since = values[-1] if a.since is None else a.since
    if since not in values:
        raise BadInput(f"--since {since} is not a value of {a.by} in the selection: use one of {', '.join(values)}")
    print(as_json(s, r, values, a.by) if a.json else report(s, r, values, a.by, a.threshold, a.fdr))
    title = f"history {a.by} · {fs or a.experiment}"
    run_id = log(uri, a.experiment, title, s, r, values, a.by, a.out,
                 {"by": a.by, "selection": fs, "threshold": a.threshold, "fdr": a.fdr, "values": " ".join(values)})
    print(f"\nlogged as run {run_id} ({title}) in {uri}" + (f"; report: {a.out / 'report.md'}" if a.out else ""),
          file=sys.stderr if a.json else sys.stdout)
    new = values[values.index(since):]
    slower = r[(r["verdict"] == Verdict.SLOWER) & r["where"].isin(new)] if not r.empty else r
    return LOST if a.fail_on_regression and len(slower) else OK


def selected(uri: str, experiment: str, filter_string: str):
    """The runs of a filter as report.tables.tidy rows (the store's errors as they come)."""
    from experiments.report import tables  # pandas and mlflow are slow to import: only once runs are asked for
    from experiments.store import tracking

    return tables.tidy(tracking.Store(uri).search(experiment, filter_string))


def judged(t, by: str, uri: str, threshold: float, alpha: float):
    """(series, regressions table, the axis's values) of the selected runs along `by` (report.history), from each
    run's per-process medians in the store; BadInput where `by` is no key or has one value."""
    from experiments.report import history  # pandas and scipy are slow to import: only once runs are selected
    from experiments.measure.verdict import process_medians
    from experiments.store import tracking

    if by not in t.columns:
        known = sorted(c for c in t.columns if c.endswith(("_version", "_commit", "fingerprint", "_date", "_spec")))
        raise BadInput(f"no tag or param {by!r} in the selected runs: use one of {', '.join(known + ['repeat'])}")
    values = history.axis(t, by)
    if len(values) < 2:
        raise BadInput(f"the selected runs have one value of {by} ({', '.join(values) or 'none'}): select runs "
                       "measured at two or more (nnbench versions, or a sweep with runtime.python=A,B)")
    samples = cache(tracking.Store(uri).load_samples)
    s = history.series(t, by, lambda run_id, op: process_medians(samples(run_id)[op]))
    return s, history.regressions(s, threshold, alpha), values


def as_json(s, r, values: list[str], by: str) -> str:
    """What history judged, for a script: {"by", "values", "changes": [...], "points": [...]}."""
    import json  # only for --json

    def records(df) -> list[dict]:
        return json.loads(df.to_json(orient="records")) if not df.empty else []

    return json.dumps({"by": by, "values": values, "changes": records(r),
                       "points": records(s.drop(columns=["process_medians_s"], errors="ignore"))}, indent=1)


def report(s, r, values: list[str], by: str, threshold: float, alpha: float) -> str:
    """What history prints: each point's medians along the axis, the regressions table and a count."""
    from experiments.report import history  # pandas is slow to import: only once runs are selected

    points = s.groupby(history.POINT, dropna=False).ngroups
    out = [f"{points} points along {by}: {' → '.join(values)}", "", history.overview(s, r, values), ""]
    out += [history.regressions_markdown(r), ""] if not r.empty else []
    counts = r["verdict"].value_counts() if not r.empty else {}
    slower, faster = (counts.get(v, 0) for v in (Verdict.SLOWER, Verdict.FASTER))
    out.append(f"{len(r)} changes ({slower} slower, {faster} faster) in {points} "
               f"points (threshold {threshold:.0%}, false discovery rate {alpha})")
    out.append("verdicts unpaired: each compares the processes measured at one value with those at another, measured "
               "at different times; to compare two environments or variants paired, measured now burst by burst: "
               "nnbench ab AXIS=A,B, or nnbench versions SPECS --paired")
    if n := history.unjudged(s):
        out.append(f"note: {n} points have one process per value and too few values to judge; measure them with "
                   "bench.processes >= 2 (bench=default) or replicates (repeat=0,1,2)")
    return "\n".join(out)


def log(uri: str, experiment: str, title: str, s, r, values: list[str], by: str, out: Path | None, params: dict,
        parent: str | None = None, status: str = "FINISHED", note: str = "") -> str:
    """The report as a run `title` of its own (or as the artifacts of `parent`, an open run, which it closes with
    `status`); returns the run's id."""
    from experiments.report import pages  # matplotlib is slow to import: only once runs are judged
    from experiments.store import tracking  # so is mlflow

    with tempfile.TemporaryDirectory() as tmp:
        where = out or Path(tmp)
        pages.write_history(s, r, values, by, where, title, note)
        store = tracking.Store(uri)
        run_id = parent or store.start_parent(store.open(experiment), title, params, kind="history")
        store.finish_parent(run_id, where, status)
    return run_id

"""Each point followed along an axis and judged unpaired: what `nnbench history` answers, and what `compare` (two
sweeps), `versions --unpaired` and `bisect --unpaired` reuse: the runs selected, each point's series judged at its
change points (report.regressions), the report in words and as JSON, and its pages logged to a run."""
from __future__ import annotations

import tempfile
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from experiments.common.errors import BadInput
from experiments.stats.verdicts import Verdict

if TYPE_CHECKING:
    from experiments.report.regressions import History


def selected(uri: str, experiment: str, filter_string: str):
    """The runs of a filter as report.tables.tidy rows (the store's errors as they come)."""
    from experiments.report import tables  # pandas and mlflow are slow to import: only once runs are asked for
    from experiments.store import tracking

    return tables.tidy(tracking.Store(uri).search(experiment, filter_string))


def judged(t, by: str, uri: str, threshold: float, alpha: float) -> History:
    """The selected runs along `by` (report.regressions), judged from each run's per-process medians in the store;
    BadInput where `by` is no key or has one value."""
    from experiments.report import regressions  # pandas and scipy are slow to import: only once runs are selected
    from experiments.stats.unpaired import process_medians
    from experiments.store import tracking

    if by not in t.columns:
        known = sorted(c for c in t.columns if c.endswith(("_version", "_commit", "fingerprint", "_date", "_spec")))
        raise BadInput(f"no tag or param {by!r} in the selected runs: use one of {', '.join(known + ['repeat'])}")
    values = regressions.axis(t, by)
    if len(values) < 2:
        raise BadInput(f"the selected runs have one value of {by} ({', '.join(values) or 'none'}): select runs "
                       "measured at two or more (nnbench versions, or a sweep with runtime.python=A,B)")
    samples = cache(tracking.Store(uri).load_samples)
    s = regressions.series(t, by, lambda run_id, op: process_medians(samples(run_id)[op]))
    return regressions.History(s, regressions.regressions(s, threshold, alpha), values, by)


def between(sweeps: list, ids: list[str], uri: str, threshold: float, alpha: float) -> History:
    """Each point of the second sweep's selected runs judged against the first's (`sweeps`: their report.tables.tidy
    rows; `ids`: their run ids), as `judged` judges a step along an axis of two values, 1 and 2; BadInput where they
    share no point."""
    import pandas as pd  # pandas: only once two sweeps are asked for

    point = ["model", "op", "batch_size", "variant"]
    if not set.intersection(*(set(map(tuple, t[point].values)) for t in sweeps)):
        raise BadInput(f"sweeps {ids[0]} and {ids[1]} share no point (model, op, batch size, variant): select two "
                       "sweeps of the same points")
    t = pd.concat([t.assign(sweep=str(n)) for n, t in enumerate(sweeps, 1)], ignore_index=True)
    return judged(t, "sweep", uri, threshold, alpha)


def answer(h: History) -> dict:
    """What history judged, for a script: {"by", "values", "changes": [...], "points": [...]}."""
    import json  # only for --json: pandas' own JSON of a table (dates, NaN as null), read as plain values

    def records(df) -> list[dict]:
        return json.loads(df.to_json(orient="records")) if not df.empty else []

    return {"by": h.by, "values": h.values, "changes": records(h.regressions),
            "points": records(h.series.drop(columns=["process_medians_s"], errors="ignore"))}


def as_json(h: History) -> str:
    """`answer` as --json prints it."""
    import json  # only for --json

    return json.dumps(answer(h), indent=1)


def report(h: History, threshold: float, alpha: float) -> str:
    """What history prints: each point's medians along the axis, the regressions table and a count."""
    from experiments.report import regressions  # pandas is slow to import: only once runs are selected

    s, r = h.series, h.regressions
    points = s.groupby(regressions.POINT, dropna=False).ngroups
    out = [f"{points} points along {h.by}: {' → '.join(h.values)}", "", regressions.overview(s, r, h.values), ""]
    out += [regressions.regressions_markdown(r), ""] if not r.empty else []
    counts = r["verdict"].value_counts() if not r.empty else {}
    slower, faster = (counts.get(v, 0) for v in (Verdict.SLOWER, Verdict.FASTER))
    out.append(f"{len(r)} changes ({slower} slower, {faster} faster) in {points} "
               f"points (threshold {threshold:.0%}, false discovery rate {alpha})")
    out.append("verdicts unpaired: each compares the processes measured at one value with those at another, measured "
               "at different times; to compare two environments or variants paired, measured now burst by burst: "
               "nnbench ab AXIS=A,B, or nnbench versions SPECS --paired")
    if n := regressions.unjudged(s):
        out.append(f"note: {n} points have one process per value and too few values to judge; measure them with "
                   "bench.processes >= 2 (bench=default) or replicates (repeat=0,1,2)")
    return "\n".join(out)


def slower(h: History, since: str | None = None) -> int:
    """How many of the changes found are to slower (`since`: those that start at that value or after it)."""
    r = h.regressions
    if r.empty:
        return 0
    hit = r["verdict"] == Verdict.SLOWER
    if since is not None:
        hit &= r["where"].isin(h.values[h.values.index(since):])
    return int(hit.sum())


def write(h: History, where: Path, title: str, note: str = "") -> None:
    """The report's pages in `where`: report.md and .html, regressions.csv, series.csv, a trend plot per model and
    op with its steps marked."""
    from experiments.report import pages  # matplotlib is slow to import: only once runs are judged

    pages.write_history(h, where, title, note)


def log(h: History, title: str, parent, note: str = "") -> None:
    """The report's pages as the artifacts of `parent` (an open store.parent.Parent), which they close."""
    with tempfile.TemporaryDirectory() as tmp:
        write(h, Path(tmp), title, note)
        parent.finish(Path(tmp))


def logged(h: History, title: str, uri: str, experiment: str, params: dict, out: Path | None = None) -> str:
    """The report as a run `title` of its own (tagged nnbench.history), its pages also kept in `out`; the run's id."""
    from experiments.store import tracking  # mlflow is slow to import: only once runs are judged
    from experiments.store.parent import parent_run

    with tempfile.TemporaryDirectory() as tmp:
        where = out or Path(tmp)
        write(h, where, title)
        store = tracking.Store(uri)
        with parent_run(store, store.open(experiment), title, params, kind="history") as run:
            run.finish(where)
    return run.run_id

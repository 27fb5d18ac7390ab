"""A point's runs along an axis (a version, a date, a commit): its series, the change points in it and the verdict on
each, as the regressions table that `nnbench history`, `versions`, `bisect` and `calibrate` share. Parent side; no
MLflow here (the caller hands in each run's per-process medians).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import pandas as pd
from packaging.version import InvalidVersion, Version

from experiments.stats import changepoints
from experiments.report.tables import POINT
from experiments.stats.unpaired import judge
from experiments.stats.verdicts import ALPHA, THRESHOLD, Verdict

Medians = Callable[[str, str], list[float]]  # (run id, op) -> that run's per-process medians


@dataclass(frozen=True)
class History:
    """Each point's runs along an axis, judged: the series (`series`), the regressions table (`regressions`: one row
    per change found), the axis's values in order, and the axis."""

    series: pd.DataFrame
    regressions: pd.DataFrame
    values: list[str]
    by: str


def ordered(values, first_seen: pd.Series) -> list[str]:
    """Versions in version order when they all parse as versions, else in the order they first ran (dates as
    `run_date` are written, YYYY-MM-DD, sort the same both ways)."""
    try:
        return sorted(values, key=Version)
    except InvalidVersion:
        return sorted(values, key=lambda v: first_seen[v])


def with_value(t: pd.DataFrame, by: str) -> tuple[pd.DataFrame, pd.Series]:
    """Rows that have a value for `by` (as text), and when each value first ran."""
    t = t.dropna(subset=[by]).astype({by: str})
    return t, t.groupby(by)["start_time"].min()


def axis(t: pd.DataFrame, by: str) -> list[str]:
    """Every value of `by` in the selection, in order."""
    t, first_seen = with_value(t, by)
    return ordered(list(t[by].unique()), first_seen)


def series(t: pd.DataFrame, by: str, medians_of: Medians) -> pd.DataFrame:
    """One row per (point, value of `by`), in axis order: its runs, their per-process medians, and their median."""
    t, _ = with_value(t, by)
    position = {v: i for i, v in enumerate(axis(t, by))}
    rows = []
    for key, g in t.groupby(POINT + [by], dropna=False, sort=False):
        runs = list(g["run_id"])
        medians = [m for r in runs for m in medians_of(r, key[1])]
        rows.append(dict(zip(POINT + ["value"], key)) | {
            "position": position[key[-1]], "runs": len(runs), "processes": len(medians),
            "median_s": float(np.median(medians)), "process_medians_s": medians, "run_ids": ",".join(runs)})
    s = pd.DataFrame(rows)
    return s.sort_values(POINT + ["position"], ignore_index=True) if not s.empty else s


def segments(positions: list[int], cut: list[int]) -> list[tuple[int, int]]:
    """[start, end) index ranges of the levels that the change points `cut` (indices into positions) separate."""
    edges = [0, *cut, len(positions)]
    return list(zip(edges, edges[1:]))


def regressions(s: pd.DataFrame, threshold: float = THRESHOLD, alpha: float = ALPHA) -> pd.DataFrame:
    """Each change point of each point's series, judged between the levels on either side of it: one row per
    change that the verdict confirms (slower or faster), all points' change points judged together (BH).

    Columns: the point, `where` (the first value of the new level), `before` and `after` (the levels' value ranges),
    their medians, the ratio after/before with its interval, p and q, the verdict and the processes on each side.
    """
    found, pairs = [], []
    for key, g in s.groupby(POINT, dropna=False, sort=False):
        groups, vals = list(g["process_medians_s"]), list(g["value"])
        levels = segments(vals, changepoints.breaks(groups))
        for (a0, a1), (b0, b1) in zip(levels, levels[1:]):
            old = [m for grp in groups[a0:a1] for m in grp]
            new = [m for grp in groups[b0:b1] for m in grp]
            found.append(dict(zip(POINT, key)) | {
                "where": vals[b0], "before": span(vals[a0:a1]), "after": span(vals[b0:b1]),
                "before_median_s": float(np.median(old)), "after_median_s": float(np.median(new))})
            pairs.append((old, new))
    rows = []
    for row, v in zip(found, judge(pairs, threshold, alpha)):
        if v.verdict.changed:
            rows.append(row | {"ratio": v.ratio, "ci95_low": v.ci_low, "ci95_high": v.ci_high, "p_value": v.p_value,
                               "q_value": v.q_value, "verdict": v.verdict, "processes_before": v.processes_old,
                               "processes_after": v.processes_new})
    return pd.DataFrame(rows, columns=[*POINT, "where", "before", "after", "before_median_s", "after_median_s",
                                       "ratio", "ci95_low", "ci95_high", "p_value", "q_value", "verdict",
                                       "processes_before", "processes_after"])


def span(values: list[str]) -> str:
    return values[0] if len(values) == 1 else f"{values[0]}…{values[-1]}"


def unjudged(s: pd.DataFrame) -> int:
    """Points whose series can't be judged: no value has two processes, and too few values to tell noise apart."""
    n = 0
    for _, g in s.groupby(POINT, dropna=False, sort=False):
        if len(g) > 1 and (g["processes"] < 2).all() and len(g) < changepoints.BLIND_FROM:
            n += 1
    return n


def overview(s: pd.DataFrame, r: pd.DataFrame, values: list[str], width: int = 8) -> str:
    """Markdown: a row per point, its median (ms) at each value (the last `width` values), ▲/▼ where a slower/faster
    level starts."""
    shown = values[-width:]
    marks = {(*row[POINT], row["where"]): "▲ " if row["verdict"] == Verdict.SLOWER else "▼ "
             for _, row in r.iterrows()}
    rows = []
    for key, g in s.groupby(POINT, dropna=False, sort=False):
        cells = dict(zip(g["value"], g["median_s"]))
        rows.append(dict(zip(["model", "op", "batch", "variant", "device"], key)) | {
            v: (marks.get((*key, v), "") + f"{cells[v] * 1e3:.4g}") if v in cells else "" for v in shown})
    head = "" if len(values) == len(shown) else f"(the last {width} of {len(values)} values)\n\n"
    return head + pd.DataFrame(rows).to_markdown(index=False)


def regressions_markdown(r: pd.DataFrame) -> str:
    view = pd.DataFrame({
        "model": r["model"], "op": r["op"], "batch": r["batch_size"], "variant": r["variant"], "where": r["where"],
        "before → after": r["before"] + " → " + r["after"],
        "median ms": [f"{a * 1e3:.4g} → {b * 1e3:.4g}" for a, b in zip(r["before_median_s"], r["after_median_s"])],
        "after/before": r["ratio"].map("{:.3f}".format),
        "95% interval": [f"[{a:.3f}, {b:.3f}]" for a, b in zip(r["ci95_low"], r["ci95_high"])],
        "q": r["q_value"].map("{:.2g}".format),
        "processes": r["processes_before"].astype(str) + "+" + r["processes_after"].astype(str),
        "verdict": r["verdict"],
    })
    return view.to_markdown(index=False)


"""Judge each change of a tag or param (a version, a commit, a date) per point: the verdict table. Parent side."""
from __future__ import annotations

import pandas as pd
from packaging.version import InvalidVersion, Version

from experiments.report.tables import POINT
from experiments.report.verdict import compare


def ordered(values, first_seen: pd.Series) -> list[str]:
    """Versions in version order when they all parse as versions, else in the order they first ran."""
    try:
        return sorted(values, key=Version)
    except InvalidVersion:
        return sorted(values, key=lambda v: first_seen[v])


def with_value(t: pd.DataFrame, by: str) -> tuple[pd.DataFrame, pd.Series]:
    """Rows that have a value for `by` (as text), and when each value first ran."""
    t = t.dropna(subset=[by]).astype({by: str})
    return t, t.groupby(by)["start_time"].min()


def changes(t: pd.DataFrame, by: str, samples_of, threshold: float = 0.05, alpha: float = 0.05) -> pd.DataFrame:
    """Per point, each value of `by` against the one before it: ratio, bootstrap CI, U-test p, verdict.

    Every measuring process of every run of a (point, value) counts as one process (bench.processes, and the
    replicates of repeat=0,1,...). `samples_of(run_id, op)` returns that run's raw per-call samples, one list per
    process (from the samples.json artifact).
    """
    t, first_seen = with_value(t, by)
    rows = []
    for key, g in t.groupby(POINT, dropna=False):
        values = ordered(list(g[by].unique()), first_seen)
        runs = {v: list(g.loc[g[by] == v, "run_id"]) for v in values}
        for old, new in zip(values, values[1:]):
            a, b = ([proc for r in runs[v] for proc in samples_of(r, key[1])] for v in (old, new))
            v = compare(a, b, threshold, alpha)
            rows.append(dict(zip(POINT, key)) | {
                "old": old, "new": new, "runs_old": len(runs[old]), "runs_new": len(runs[new]),
                "processes_old": len(a), "processes_new": len(b),
                "old_median_s": g.loc[g[by] == old, "median_s"].median(),
                "new_median_s": g.loc[g[by] == new, "median_s"].median(),
                "ratio": v.ratio, "ci95_low": v.ci_low, "ci95_high": v.ci_high, "p_value": v.p_value,
                "verdict": v.verdict, "old_run_ids": ",".join(runs[old]), "new_run_ids": ",".join(runs[new])})
    return pd.DataFrame(rows)


def changes_markdown(c: pd.DataFrame) -> str:
    view = pd.DataFrame({
        "model": c["model"], "op": c["op"], "batch": c["batch_size"], "variant": c["variant"],
        "old → new": c["old"] + " → " + c["new"],
        "runs": c["runs_old"].astype(str) + "+" + c["runs_new"].astype(str),
        "processes": c["processes_old"].astype(str) + "+" + c["processes_new"].astype(str),
        "median ms": [f"{a * 1e3:.4g} → {b * 1e3:.4g}" for a, b in zip(c["old_median_s"], c["new_median_s"])],
        "new/old": c["ratio"].map("{:.3f}".format),
        "95% CI": [f"[{a:.3f}, {b:.3f}]" for a, b in zip(c["ci95_low"], c["ci95_high"])],
        "p (U test)": c["p_value"].map("{:.2g}".format), "verdict": c["verdict"],
    })
    return view.to_markdown(index=False)

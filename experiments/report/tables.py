"""Comparison tables from runs as a pandas DataFrame (`mlflow.search_runs` output): one row per measured (run, op),
points, speedups, the summary and its Markdown. No MLflow and no plotting here. Parent side."""
from __future__ import annotations

import pandas as pd

from dataclasses import dataclass
from itertools import combinations

from experiments.common.config import DEFAULT_BASELINE, OPS
from experiments.common.protocol import METRICS, PARTS, STATS
from experiments.common.columns import DERIVED, FLAGS, PARAMS
from experiments.stats.paired import PAIRED

TIMES = tuple(f"time_{p}_s" for p in PARTS)  # a profiled op: where one step's wall time went
PROFILE = TIMES + ("profile_wall_s", "profile_wall_ratio")
OP_METRICS = STATS + METRICS + DERIVED + PROFILE  # the `<op>_<name>` metrics of a point run
LABELS = {"conv": "convolution", "matmul": "matmul", "attention": "attention (fused)", "recurrent": "recurrent (LSTM)",
          "elementwise": "elementwise", "norm": "normalization",
          "pool": "pooling", "loss": "loss", "optimizer": "optimizer update", "copy": "copies and layouts",
          "other": "other ops", "overhead": "overhead (no op running)"}


def tidy(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per measured (run, op), from `mlflow.search_runs` output; unmeasured runs are dropped."""
    rows = []
    for _, r in runs.iterrows():
        if pd.isna(r.get("params.model")):
            continue  # a sweep's parent run
        for op in OPS:
            if pd.isna(r.get(f"metrics.{op}_median_s")):
                continue
            row = {"run_id": r["run_id"], "run_name": r.get("tags.mlflow.runName"), "op": op,
                   "start_time": r.get("start_time")}
            row |= {p: r.get(f"params.{p}") for p in PARAMS}
            row |= {m: r.get(f"metrics.{op}_{m}") for m in OP_METRICS} | {"peak_tflops": r.get("metrics.peak_tflops")}
            row |= {c[5:]: r[c] for c in runs.columns if c.startswith("tags.") and not c.startswith("tags.mlflow.")}
            row |= {f"paired_{m}": r.get(f"metrics.{op}_{m}") for m in PAIRED}
            row["verdict"] = r.get(f"tags.{op}_verdict")
            rows.append(row)
    t = pd.DataFrame(rows)
    if t.empty:
        return t
    t["batch_size"] = t["batch_size"].astype(int)
    for col in (f"paired_{m}" for m in PAIRED):  # a point with one trial has no interval: None, not NaN
        t[col] = pd.to_numeric(t[col], errors="coerce")
    named = t["mode"] + " " + t["precision"]
    # a paired point's label tells namesakes apart (`jax-jit fp32 runtime.python=jax==0.10.1`); `variant` stays the
    # name, which a point keeps along a history of versions
    t["label"] = t["variant"].fillna(named) if "variant" in t else named
    timed = t.groupby("label")["sync"].transform("nunique") > 1  # bench.sync=synced,pipelined: apart, not replicates
    if timed.any():
        t.loc[timed, "label"] = t.loc[timed, "label"] + " " + t.loc[timed, "sync"].astype(str)
    t["variant"] = named
    t["run_date"] = pd.to_datetime(t["start_time"]).dt.strftime("%Y-%m-%d")
    return t.sort_values(["model", "op", "variant", "batch_size"], ignore_index=True)


POINT = ["model", "op", "batch_size", "variant", "device"]
UNSHOWN = "†"  # marks a speedup between two implementations not shown to compute the same function
UNSHOWN_LEGEND = (f"{UNSHOWN}: between two frameworks not shown to compute the same function (their points' parity "
                  "is failed or unchecked: see the tags parity and parity_reason)")


def fmt_time(seconds: float) -> str:
    """A time in the unit that reads best: 532 µs, 1.18 ms, 2.5 s."""
    for unit, scale in (("s", 1.0), ("ms", 1e-3)):
        if abs(seconds) >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds * 1e6:.3g} µs"


def points(t: pd.DataFrame) -> pd.DataFrame:
    """One row per point: replicate runs (repeat=0,1,...) folded into the median of their statistics; its `variant`
    is its label (namesakes apart: two environments of one framework are two lines)."""
    parity = t["parity"] if "parity" in t else pd.Series("ok", index=t.index)
    flags = pd.DataFrame({flag: t[flag] == "true" if flag in t else False for flag in FLAGS}, index=t.index)
    # a point's parity: "ok" where every run says so; a run written before the check has no parity tag (NaN)
    t = t.assign(_no_tag=parity.isna(), _ok=parity == "ok", _failed=parity == "failed", **flags)
    g = t.groupby([*POINT, "label"], sort=True, dropna=False)
    out = g[["median_s", "p25_s", "p75_s"]].median()
    out["ci95_low_s"], out["ci95_high_s"] = g["ci95_low_s"].min(), g["ci95_high_s"].max()
    out["n_samples"], out["runs"] = g["n_samples"].sum(), g.size()
    out["run_id"] = g["run_id"].agg(",".join)
    out["mode"], out["precision"] = g["mode"].first(), g["precision"].first()
    out["mfu"] = g["mfu"].median()
    out["framework"] = g["framework"].first()
    for col in ("paired_speedup", "paired_speedup_ci95_low", "paired_speedup_ci95_high", "verdict", "compared_with",
                "design"):  # paired (replicates: the median speedup, the widest interval, the first verdict)
        if col in t:
            how = {"paired_speedup": "median", "paired_speedup_ci95_low": "min", "paired_speedup_ci95_high": "max"}
            out[col] = g[col].agg(how.get(col, "first"))
    every, anyone = g[["_no_tag", "_ok"]].all(), g[["_failed", *FLAGS]].any()
    ok = every["_no_tag"] | every["_ok"]
    out["parity"] = ok.map({True: "ok", False: "unchecked"}).mask(~ok & anyone["_failed"], "failed")
    out[list(FLAGS)] = anyone[list(FLAGS)]  # a point is flagged when any of its runs is
    out = out.reset_index()
    out["variant"] = out.pop("label")
    out["throughput_samples_per_s"] = out["batch_size"] / out["median_s"]
    return out


def series(t: pd.DataFrame, model: str, op: str, y: str = "median_s") -> dict[str, pd.DataFrame]:
    """The lines of one figure: variant -> batch size, y and its p25-p75 band (time) or the same for throughput."""
    sub = t[(t["model"] == model) & (t["op"] == op)]
    sub = points(sub) if not sub.empty else sub
    out = {}
    for variant, g in sub.groupby("variant", sort=True):
        g = g.sort_values("batch_size")
        if y == "median_s":
            out[variant] = pd.DataFrame({"batch_size": g["batch_size"], "y": g["median_s"],
                                       "lo": g["p25_s"], "hi": g["p75_s"]}).reset_index(drop=True)
        elif y == "mfu":  # no band: one peak per environment
            if g["mfu"].notna().any():
                out[variant] = pd.DataFrame({"batch_size": g["batch_size"], "y": g["mfu"], "lo": g["mfu"],
                                             "hi": g["mfu"]}).reset_index(drop=True)
        else:  # throughput: the band follows from the time quartiles
            out[variant] = pd.DataFrame({"batch_size": g["batch_size"], "y": g["throughput_samples_per_s"],
                                       "lo": g["batch_size"] / g["p75_s"],
                                       "hi": g["batch_size"] / g["p25_s"]}).reset_index(drop=True)
    return out


def speedups(t: pd.DataFrame, baseline: str = DEFAULT_BASELINE) -> pd.DataFrame:
    """The speedup per (model, op, batch size, variant): > 1 means faster than the baseline. Measured paired against
    `baseline` (the point's `compared_with`): its own speedup, interval (`speedup_low` to `speedup_high`) and
    verdict, `sure` where that is slower or faster. Else the baseline's median over this one's, with the range the
    two re-run intervals allow, `sure` where it excludes 1."""
    t = points(t)
    base = t[t["variant"] == baseline].set_index(["model", "op", "batch_size"])[["median_s", "ci95_low_s",
                                                                                  "ci95_high_s"]]
    s = t.join(base.add_prefix("baseline_"), on=["model", "op", "batch_size"])
    s["baseline_s"] = s["baseline_median_s"]
    s["speedup"] = s["baseline_s"] / s["median_s"]
    s["speedup_low"] = s["baseline_ci95_low_s"] / s["ci95_high_s"]
    s["speedup_high"] = s["baseline_ci95_high_s"] / s["ci95_low_s"]
    s["sure"] = (s["speedup_low"] > 1) | (s["speedup_high"] < 1)
    s["paired"] = False
    if "compared_with" in s and "paired_speedup" in s:  # measured paired against this baseline: its own numbers
        on = (s["compared_with"] == baseline) & s["paired_speedup"].notna()
        for col in ("speedup", "speedup_low", "speedup_high"):
            s.loc[on, col] = s.loc[on, {"speedup": "paired_speedup", "speedup_low": "paired_speedup_ci95_low",
                                        "speedup_high": "paired_speedup_ci95_high"}[col]]
        s.loc[on, "sure"] = s.loc[on, "verdict"].isin(["slower", "faster"])
        s.loc[on | (s["variant"] == baseline) & (s["design"] == "paired"), "paired"] = True
    s = s[s["speedup"].notna()]
    # one framework against itself is one implementation; two frameworks are the same function only where shown
    frameworks = t.groupby("variant")["framework"].first()
    s["shown"] = (s["framework"] == frameworks.get(baseline)) | (s["parity"] == "ok")
    return s[["model", "op", "batch_size", "variant", "median_s", "baseline_s", "speedup", "speedup_low",
              "speedup_high", "sure", "shown", "paired", *(["verdict"] if "verdict" in s else [])]
             ].reset_index(drop=True)


def summary(t: pd.DataFrame, baseline: str = DEFAULT_BASELINE) -> pd.DataFrame:
    """The table: one row per (model, op, batch size, variant) with median, spread, CI and speedup."""
    s = points(t)[["model", "op", "batch_size", "variant", "median_s", "p25_s", "p75_s", "ci95_low_s",
                   "ci95_high_s", "n_samples", "runs", "throughput_samples_per_s", "mfu", *FLAGS, "run_id"]]
    sp = speedups(t, baseline).set_index(["model", "op", "batch_size", "variant"])[
        ["speedup", "sure", "shown", "speedup_low", "speedup_high", "paired"]]
    s = s.join(sp.rename(columns={"speedup": f"speedup_vs_{baseline.replace(' ', '_')}", "sure": "speedup_sure",
                                  "shown": "speedup_shown", "paired": "speedup_paired"}),
               on=["model", "op", "batch_size", "variant"])
    return s.reset_index(drop=True)


@dataclass(frozen=True)
class Speedup:
    """A speedup as the summary holds it: the ratio, whether it is sure (its verdict slower or faster; unpaired: the
    two intervals apart), whether it is shown (`speedups`), its interval, and whether it was measured paired."""

    ratio: float
    sure: bool
    shown: bool
    low: float
    high: float
    paired: bool

    def said(self, marked: bool) -> str:
        """The speedup in the table: `0.66× [0.64, 0.68]` paired (in parentheses where its verdict is not slower or
        faster), `(0.83×)` unpaired where the two intervals overlap; `unpaired` where the table has paired ones too
        (`marked`)."""
        v = self.ratio
        if pd.isna(v):
            return ""
        out = f"{v:.2f}×" if self.sure or v == 1 else f"({v:.2f}×)"
        if self.paired and v != 1 and not pd.isna(self.low):
            out += f" [{self.low:.2f}, {self.high:.2f}]"
        elif marked and not self.paired:
            out += " unpaired"
        return out + ("" if self.shown else f" {UNSHOWN}")


def markdown(s: pd.DataFrame) -> str:
    """The summary as a Markdown table, readable in a terminal, in the MLflow UI, an issue or a PR: the median per
    call, the 95% interval a re-run is expected to read in, throughput, MFU, the speedup against the baseline (in
    parentheses where the two intervals overlap: not sure) and the flags."""
    (speedup,) = [c for c in s.columns if c.startswith("speedup_vs_")]
    sure = s["speedup_sure"] if "speedup_sure" in s else pd.Series(True, index=s.index)
    shown = s["speedup_shown"].fillna(True) if "speedup_shown" in s else pd.Series(True, index=s.index)
    paired = s["speedup_paired"].fillna(False) if "speedup_paired" in s else pd.Series(False, index=s.index)
    low, high = (s[c] if c in s else pd.Series(float("nan"), index=s.index) for c in ("speedup_low", "speedup_high"))
    view = pd.DataFrame({
        "model": s["model"], "op": s["op"], "batch": s["batch_size"], "variant": s["variant"],
        "median": s["median_s"].map(fmt_time),
        "95% re-run interval": [f"{fmt_time(a)} – {fmt_time(b)}" for a, b in zip(s["ci95_low_s"], s["ci95_high_s"])],
        "samples/s": s["throughput_samples_per_s"].map("{:.4g}".format),
        "MFU": s["mfu"].map(lambda v: "" if pd.isna(v) else f"{v:.1%}"),
        speedup.replace("_", " "): [Speedup(*row).said(marked=bool(paired.any())) for row in
                                    zip(s[speedup], sure.fillna(True), shown, low, high, paired)],
        "flags": [" ".join(f.upper() for f in FLAGS if f in s and row[f]) for _, row in s.iterrows()],
    })
    return view.to_markdown(index=False)


def breakdown(t: pd.DataFrame, baseline: str = DEFAULT_BASELINE) -> pd.DataFrame:
    """One row per profiled (model, op, batch size, variant): seconds per part of one step, the profiled step and
    the timed median (replicates: their median); the baseline first among the variants, then by name."""
    if "time_overhead_s" not in t or t["time_overhead_s"].isna().all():
        return pd.DataFrame()
    g = t.dropna(subset=["time_overhead_s"]).groupby(["model", "op", "batch_size", "variant"], sort=True)
    b = g[[*TIMES, "profile_wall_s", "median_s"]].median()
    b[list(TIMES)] = b[list(TIMES)].fillna(0.0)  # a part a run did not log (an older vocabulary) took no time
    b["mode"], b["precision"] = g["mode"].first(), g["precision"].first()
    b = b.reset_index()
    b["first"] = b["variant"] != baseline
    return b.sort_values(["model", "op", "batch_size", "first", "variant"], ignore_index=True).drop(columns="first")


def differences(b: pd.DataFrame) -> list[str]:
    """One sentence per pair of variants of a profiled point: the part of the step that differs most, e.g.
    `torch-eager vs jax-jit, lenet training bs128: optimizer update 0.4 vs 6.1 ms (step 12.1 vs 24.7 ms)`."""
    out = []
    for (model, op, bs), g in b.groupby(["model", "op", "batch_size"], sort=False):
        for x, y in combinations(g.to_dict("records"), 2):
            part = max(PARTS, key=lambda p: abs(y[f"time_{p}_s"] - x[f"time_{p}_s"]))
            names = (x["mode"], y["mode"]) if x["precision"] == y["precision"] else (x["variant"], y["variant"])
            out.append(f"{names[0]} vs {names[1]}, {model} {op} bs{bs}: {LABELS[part]} "
                       f"{x[f'time_{part}_s'] * 1e3:.3g} vs {y[f'time_{part}_s'] * 1e3:.3g} ms "
                       f"(step {x['profile_wall_s'] * 1e3:.3g} vs {y['profile_wall_s'] * 1e3:.3g} ms)")
    return out


def breakdown_markdown(b: pd.DataFrame) -> str:
    """ms per part of one profiled step, the step, and the timed median beside it."""
    view = b[["model", "op", "batch_size", "variant"]].rename(columns={"batch_size": "batch"})
    for p in PARTS:
        view[p] = (b[f"time_{p}_s"] * 1e3).map("{:.3g}".format)
    view["profiled step ms"] = (b["profile_wall_s"] * 1e3).map("{:.4g}".format)
    view["timed median ms"] = (b["median_s"] * 1e3).map("{:.4g}".format)
    return view.to_markdown(index=False)

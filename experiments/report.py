"""Comparison tables and seed-000-style plots from runs as a pandas DataFrame (no MLflow here)."""
from __future__ import annotations

import base64
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from experiments.config import DEFAULT_BASELINE, OPS  # noqa: E402
from experiments.protocol import METRICS  # noqa: E402
from experiments.records import DERIVED, PARAMS  # noqa: E402
from experiments.timing import STATS  # noqa: E402

OP_METRICS = STATS + METRICS + DERIVED  # the `<op>_<name>` metrics of a point run


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
            rows.append(row)
    t = pd.DataFrame(rows)
    if t.empty:
        return t
    t["batch_size"] = t["batch_size"].astype(int)
    t["variant"] = t["mode"] + " " + t["precision"]
    t["run_date"] = pd.to_datetime(t["start_time"]).dt.strftime("%Y-%m-%d")
    return t.sort_values(["model", "op", "variant", "batch_size"], ignore_index=True)


POINT = ["model", "op", "batch_size", "variant", "device"]


def points(t: pd.DataFrame) -> pd.DataFrame:
    """One row per point: replicate runs (repeat=0,1,...) folded into the median of their statistics."""
    g = t.groupby(POINT, sort=True, dropna=False)
    out = g[["median_s", "p25_s", "p75_s"]].median()
    out["ci95_low_s"], out["ci95_high_s"] = g["ci95_low_s"].min(), g["ci95_high_s"].max()
    out["n_samples"], out["runs"] = g["n_samples"].sum(), g.size()
    out["run_id"] = g["run_id"].agg(",".join)
    out["mode"], out["precision"] = g["mode"].first(), g["precision"].first()
    out["mfu"] = g["mfu"].median()
    out["noisy"] = g["noisy"].agg(lambda v: bool((v == "true").any())) if "noisy" in t else False
    out = out.reset_index()
    out["throughput_samples_per_s"] = out["batch_size"] / out["median_s"]
    return out


def series(t: pd.DataFrame, model: str, op: str, y: str = "median_s") -> dict[str, pd.DataFrame]:
    """The lines of one figure: variant -> batch size, y and its p25-p75 band (time) or the same for throughput."""
    t = points(t)
    sub = t[(t["model"] == model) & (t["op"] == op)]
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
    """Baseline median / median per (model, op, batch size, variant): > 1 means faster than the baseline."""
    t = points(t)
    base = t[t["variant"] == baseline].set_index(["model", "op", "batch_size"])["median_s"]
    s = t.join(base.rename("baseline_s"), on=["model", "op", "batch_size"])
    s = s.dropna(subset=["baseline_s"])
    s["speedup"] = s["baseline_s"] / s["median_s"]
    return s[["model", "op", "batch_size", "variant", "median_s", "baseline_s", "speedup"]].reset_index(drop=True)


def summary(t: pd.DataFrame, baseline: str = DEFAULT_BASELINE) -> pd.DataFrame:
    """The table: one row per (model, op, batch size, variant) with median, spread, CI and speedup."""
    s = points(t)[["model", "op", "batch_size", "variant", "median_s", "p25_s", "p75_s", "ci95_low_s",
                   "ci95_high_s", "n_samples", "runs", "throughput_samples_per_s", "mfu", "noisy", "run_id"]]
    sp = speedups(t, baseline).set_index(["model", "op", "batch_size", "variant"])["speedup"]
    s = s.join(sp.rename(f"speedup_vs_{baseline.replace(' ', '_')}"), on=["model", "op", "batch_size", "variant"])
    return s.reset_index(drop=True)


def markdown(s: pd.DataFrame) -> str:
    """Medians in ms with the p25-p75 spread, readable in a terminal, an issue or a PR."""
    (speedup,) = [c for c in s.columns if c.startswith("speedup_vs_")]
    view = pd.DataFrame({
        "model": s["model"], "op": s["op"], "batch": s["batch_size"], "variant": s["variant"],
        "median ms": (s["median_s"] * 1e3).map("{:.4g}".format),
        "p25–p75 ms": [f"{a * 1e3:.4g}–{b * 1e3:.4g}" for a, b in zip(s["p25_s"], s["p75_s"])],
        "samples/s": s["throughput_samples_per_s"].map("{:.4g}".format),
        "MFU": s["mfu"].map(lambda v: "" if pd.isna(v) else f"{v:.1%}"),
    })
    view[speedup.replace("_", " ")] = s[speedup].map(lambda v: "" if pd.isna(v) else f"{v:.2f}×")
    if s["noisy"].any():  # other processes used the CPU while these were measured (README: noisy-machine guard)
        view["noisy"] = s["noisy"].map({True: "NOISY", False: ""})
    return view.to_markdown(index=False)


YLABELS = {"median_s": "Time per call (s) (log2 scale)", "throughput_samples_per_s": "Throughput (samples/s) "
           "(log2 scale)", "mfu": "MFU: achieved / calibrated peak FLOP/s (log2 scale)"}


def figure_title(model: str, op: str) -> str:
    return f"{'Training step' if op == 'training' else op.capitalize()}: {model}"


def plot_lines(t: pd.DataFrame, model: str, op: str, path: Path, y: str = "median_s") -> Path | None:
    """Seed 000's picture: y vs batch size on log2-log2 axes, one line per variant, p25-p75 band (None: no line,
    as for MFU where no run has a FLOP count)."""
    lines = series(t, model, op, y)
    if not lines:
        return None
    fig, ax = plt.subplots(figsize=(8, 5.6))
    for variant, d in lines.items():
        (line,) = ax.plot(d["batch_size"], d["y"], marker="o", linewidth=2, label=variant)
        ax.fill_between(d["batch_size"], d["lo"], d["hi"], color=line.get_color(), alpha=0.2)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    sizes = sorted({b for d in lines.values() for b in d["batch_size"]})
    ax.set_xticks(sizes, [str(b) for b in sizes])
    ax.set_xlabel("Batch size (log2 scale)")
    ax.set_ylabel(YLABELS[y])
    ax.set_title(figure_title(model, op) + {"median_s": "", "mfu": " (MFU)"}.get(y, " (throughput)"), fontweight="bold")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="upper left" if y == "median_s" else "lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def plot_speedup(t: pd.DataFrame, baseline: str, path: Path) -> Path | None:
    """Bars of speedup against the baseline per (model, op, batch size), one bar per variant."""
    s = speedups(t, baseline)
    s = s[s["variant"] != baseline]
    if s.empty:
        return None
    s["point"] = s["model"] + " " + s["op"] + " bs" + s["batch_size"].astype(str)
    wide = s.pivot_table(index="point", columns="variant", values="speedup", sort=False)
    ax = wide.plot.barh(figsize=(8, max(3, 0.35 * len(wide) * max(1, len(wide.columns)))))
    ax.axvline(1.0, color="black", linewidth=1)
    ax.set_xlabel(f"Speedup vs {baseline} (× , higher is faster)")
    ax.set_ylabel("")
    ax.invert_yaxis()
    ax.figure.tight_layout()
    ax.figure.savefig(path, dpi=100)
    plt.close(ax.figure)
    return path


def plot_samples(samples: dict, path: Path) -> Path:
    """Per-run check of noise: each op's samples in time order, and their histogram."""
    fig, axes = plt.subplots(len(samples), 2, figsize=(9, 2.6 * len(samples)), squeeze=False)
    for (op, d), (ax_t, ax_h) in zip(samples.items(), axes):
        ms = [v * 1e3 for v in d["samples_s"]]
        ax_t.plot(ms, marker=".", linewidth=0.8)
        procs = len(d.get("processes", [d]))
        ax_t.set_title(f"{op}: {len(ms)} samples of {d['block']} call(s), {procs} process(es) in turn", fontsize=9)
        ax_t.set_xlabel("sample")
        ax_t.set_ylabel("ms per call")
        ax_h.hist(ms, bins=min(40, max(5, len(ms) // 3)))
        ax_h.set_xlabel("ms per call")
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return path


def pages(out: Path, title: str, table: pd.DataFrame, table_md: str, pngs: list[Path], note: str = "") -> None:
    """report.md (PNGs beside it) and a self-contained report.html (PNGs embedded)."""
    (out / "report.md").write_text(f"# {title}\n\n{table_md}\n{note}\n"
                                   + "".join(f"![{p.stem}]({p.name})\n\n" for p in pngs))
    imgs = "".join(f'<h3>{p.stem}</h3><img src="data:image/png;base64,{base64.b64encode(p.read_bytes()).decode()}">'
                   for p in pngs)
    html_table = table.to_html(index=False, float_format=lambda v: f"{v:.6g}")
    (out / "report.html").write_text(f"<html><head><meta charset='utf-8'><title>{title}</title></head><body>"
                                     f"<h1>{title}</h1>{html_table}<pre>{note}</pre>{imgs}</body></html>")


def write(t: pd.DataFrame, out: Path, baseline: str = DEFAULT_BASELINE, title: str = "nnbench report") -> dict:
    """report.md, report.html, summary.csv and the PNGs; returns {name: path}."""
    out.mkdir(parents=True, exist_ok=True)
    s = summary(t, baseline)
    s.to_csv(out / "summary.csv", index=False)
    pngs = []
    for (model, op), _ in t.groupby(["model", "op"], sort=True):
        pngs += [plot_lines(t, model, op, out / f"time_{model}_{op}.png"),
                 plot_lines(t, model, op, out / f"throughput_{model}_{op}.png", y="throughput_samples_per_s"),
                 plot_lines(t, model, op, out / f"mfu_{model}_{op}.png", y="mfu")]
    sp = plot_speedup(t, baseline, out / "speedup.png")
    pngs = [p for p in [*pngs, sp] if p]
    note = "" if sp else f"(no speedup chart: the baseline {baseline} is not in this selection)"
    pages(out, title, s, markdown(s), pngs, note)
    (out / "summary.json").write_text(json.dumps({"baseline": baseline, "runs": int(t["run_id"].nunique())}))
    return {p.name: p for p in out.iterdir()}

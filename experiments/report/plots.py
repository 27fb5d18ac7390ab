"""Plots from the tables: seed 000's log2-log2 pictures, speedup bars, a run's samples, and a point's trend along an
axis with its change points. The only module that imports matplotlib (its Agg backend: no display). Parent side."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.ticker import FuncFormatter  # noqa: E402

from experiments.common.protocol import PARTS  # noqa: E402
from experiments.report.tables import LABELS, fmt_time, series, speedups  # noqa: E402
from experiments.stats.verdicts import Verdict  # noqa: E402

if TYPE_CHECKING:
    from experiments.report.regressions import History

YLABELS = {"median_s": "Time per call (log2 scale)", "throughput_samples_per_s": "Throughput (samples/s) "
           "(log2 scale)", "mfu": "MFU: achieved / calibrated peak FLOP/s (log2 scale)"}


def time_axis(axis) -> None:
    """Seed 000's log2 spacing, with the ticks read in µs, ms or s rather than powers of two of a second."""
    axis.set_major_formatter(FuncFormatter(lambda v, _: fmt_time(v)))
    axis.set_minor_formatter(FuncFormatter(lambda v, _: ""))


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
    if y == "median_s":
        time_axis(ax.yaxis)
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
    """A run's noise at a glance: each op's samples in time order, and their histogram. Its margins are set in
    inches, as tight_layout leaves them for these labels, without drawing the figure an extra time to find them:
    every run of a sweep draws one: four ticks an axis and one outline a histogram keep it cheap to draw."""
    height = 2.6 * len(samples)
    fig, axes = plt.subplots(len(samples), 2, figsize=(9, height), squeeze=False)
    fig.subplots_adjust(left=0.75 / 9, right=1 - 0.3 / 9, bottom=0.5 / height, top=1 - 0.3 / height, wspace=0.22,
                        hspace=0.55)
    for (op, d), (ax_t, ax_h) in zip(samples.items(), axes):
        ms = [v * 1e3 for v in d["samples_s"]]
        ax_t.plot(ms, marker=".", linewidth=0.8)
        procs = len(d.get("processes", [d]))
        ax_t.set_title(f"{op}: {len(ms)} samples of {d['block']} call(s), {procs} process(es) in turn", fontsize=9)
        ax_t.set_xlabel("sample")
        ax_t.set_ylabel("ms per call")
        ax_h.hist(ms, bins=min(40, max(5, len(ms) // 3)), histtype="stepfilled")
        ax_h.set_xlabel("ms per call")
        for ax in (ax_t, ax_h):
            ax.locator_params(nbins=4)
        ax_h.locator_params(axis="y", integer=True)  # counts
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return path


def plot_trend(h: History, model: str, op: str, path: Path) -> Path:
    """Median per call against the history's axis: a line per variant and batch size through its values' medians, a
    dot per measuring process, and a dashed line where a level starts (red: slower, green: faster) with its ratio."""
    values, by = h.values, h.by
    s, r = (d[(d["model"] == model) & (d["op"] == op)] for d in (h.series, h.regressions))
    fig, ax = plt.subplots(figsize=(8, 5.6))
    for (variant, bs), g in s.groupby(["variant", "batch_size"]):
        (line,) = ax.plot(g["position"], g["median_s"], marker="o", label=f"{variant} bs{bs}")
        dots = [(x, m) for x, ms in zip(g["position"], g["process_medians_s"]) for m in ms]
        ax.scatter(*zip(*dots), color=line.get_color(), alpha=0.4, s=10)
        for _, step in r[(r["variant"] == variant) & (r["batch_size"] == bs)].iterrows():
            x = values.index(step["where"]) - 0.5
            color = "tab:red" if step["verdict"] == Verdict.SLOWER else "tab:green"
            ax.axvline(x, color=color, linestyle="--", linewidth=1.2)
            ax.annotate(f"×{step['ratio']:.2f}", (x, step["after_median_s"]), color=color, fontsize=8,
                        xytext=(3, 3), textcoords="offset points")
    ax.set_xticks(range(len(values)), values, rotation=20)
    ax.set_yscale("log", base=2)
    ax.set_xlabel(by)
    ax.set_ylabel(YLABELS["median_s"])
    time_axis(ax.yaxis)
    ax.set_title(f"{figure_title(model, op)} across {by}", fontweight="bold")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


# One colour per part of a step, the same in every figure (tab10's, as tab20's even entries; attention and recurrent
# in the light shades beside matmul's and elementwise's); overhead is grey.
PART_COLORS = dict(zip(PARTS, (plt.get_cmap("tab20").colors[i] for i in (0, 2, 3, 5, 4, 6, 8, 10, 18, 12, 16, 14))))


def plot_breakdown(b: pd.DataFrame, model: str, op: str, batch: int, path: Path) -> Path:
    """Where one step's time goes: a stacked bar per variant, one segment per category and the overhead."""
    g = b[(b["model"] == model) & (b["op"] == op) & (b["batch_size"] == batch)]
    fig, ax = plt.subplots(figsize=(9, 2.4 + 0.5 * len(g)))
    left = pd.Series(0.0, index=g.index)
    for part in PARTS:
        ms = g[f"time_{part}_s"] * 1e3
        if (ms > 0).any():
            ax.barh(g["variant"], ms, left=left, color=PART_COLORS[part], label=LABELS[part])
            left += ms
    for y, (ms, median) in enumerate(zip(left, g["median_s"] * 1e3)):
        ax.annotate(f"{ms:.3g} ms (timed median {median:.3g})", (ms, y), xytext=(4, 0), textcoords="offset points",
                    va="center", fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, left.max() * 1.35)
    ax.set_xlabel("ms in one profiled step")
    ax.set_title(f"{figure_title(model, op)}, batch {batch}: where one step's time goes", fontweight="bold")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.3), ncol=5, fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path

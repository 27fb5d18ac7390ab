"""A sweep's answer in words and numbers, for its parent run: which variant is faster for each point, by how much
and how sure, as sentences, the summary table and the machine in one line (the run's Markdown description), with
the geometric-mean speedups as metrics. Parent side."""
from __future__ import annotations

import hashlib
import math
import re
from collections import Counter
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pandas as pd

from experiments.common.config import DEFAULT_BASELINE
from experiments.common.columns import FLAGS
from experiments.stats.geomean import Evidence, geomean
from experiments.report.tables import UNSHOWN, UNSHOWN_LEGEND, markdown, speedups, summary

# Tags of the point runs that say where and with what a sweep ran (its environment line and the parent's tags).
VERSIONS = ("jax_version", "jaxlib_version", "flax_version", "optax_version", "torch_version", "numpy_version",
            "python_version", "cuda_version", "cudnn_version")
ENVIRONMENT = ("device_name", "cpu_model", "env_fingerprint", "nnbench_git_commit", *VERSIONS)


def ratio(speedup: float) -> str:
    """1.88× faster, 1.35× slower, as fast."""
    if round(speedup, 2) == 1:
        return "as fast as"
    return f"{speedup:.2f}× faster than" if speedup > 1 else f"{1 / speedup:.2f}× slower than"


def sentence(op: str, variant: str, baseline: str, g: pd.DataFrame) -> str:
    """One variant against the baseline over the batch sizes of one model and op: its range of speedups."""
    g = g.sort_values("speedup")
    lo, hi = g.iloc[0], g.iloc[-1]
    noise = uncertain(g) + ("" if g["shown"].all() else f" {UNSHOWN}")
    if len(g) == 1:
        return f"{op}: {variant} is {ratio(hi.speedup)} {baseline} at bs{hi.batch_size}{noise}"
    if round(lo.speedup, 2) == round(hi.speedup, 2):
        return f"{op}: {variant} is {ratio(hi.speedup)} {baseline} at every batch size{noise}"
    if lo.speedup >= 1 or hi.speedup <= 1:  # the same side at every size
        word = "faster" if lo.speedup >= 1 else "slower"
        ends = sorted([(lo.speedup, lo.batch_size), (hi.speedup, hi.batch_size)],
                      key=lambda e: abs(math.log(e[0])))
        (a, bs_a), (b, bs_b) = ends
        fa, fb = (v if word == "faster" else 1 / v for v in (a, b))
        return (f"{op}: {variant} is {fa:.2f}× (bs{bs_a}) to {fb:.2f}× (bs{bs_b}) {word} than {baseline}{noise}")
    return (f"{op}: {variant} is {ratio(hi.speedup)} {baseline} at bs{hi.batch_size} and {ratio(lo.speedup)} "
            f"at bs{lo.batch_size}{noise}").replace(" than at", " at")


def uncertain(g: pd.DataFrame) -> str:
    """What of a sentence's speedups is not sure: paired, the cells whose verdict is not slower or faster (`(1 of
    4 no change)`); unpaired, those within both points' intervals (`(1 of 4 within the noise)`)."""
    unsure = g[~g["sure"]]
    if unsure.empty:
        return ""
    if g["paired"].all() and "verdict" in g:
        counts = Counter(unsure["verdict"].fillna("no verdict"))
        return " (" + ", ".join(f"{n} of {len(g)} {v}" if len(g) > 1 else v for v, n in counts.items()) + ")"
    return f" ({len(unsure)} of {len(g)} within the noise)" if len(g) > 1 else " (within the noise)"


def sentences(t: pd.DataFrame, baseline: str = DEFAULT_BASELINE) -> list[str]:
    """Per model and op, one sentence per variant giving its range of speedups against the baseline."""
    s = speedups(t, baseline)
    s = s[s["variant"] != baseline]
    return [f"{model} {sentence(op, variant, baseline, g)}"
            for (model, op, variant), g in s.groupby(["model", "op", "variant"], sort=True)]


@dataclass(frozen=True)
class Overall:
    """One variant against its baseline over the cells of one op: the geometric-mean speedup and, paired, its 95%
    interval and the cells' verdicts; and the cells' own speedups, whose directions it may hide."""

    variant: str
    baseline: str
    op: str
    speedup: float  # above 1: faster than the baseline
    low: float  # its interval (nan: unpaired, or one trial)
    high: float
    paired: bool
    shown: bool  # every speedup in it between implementations shown to compute the same function
    verdicts: dict[str, int]  # paired: cells per verdict; unpaired: cells per direction where it is sure
    cells: tuple[float, ...] = ()  # each cell's speedup

    @property
    def mixed(self) -> bool:
        """Whether its cells were judged to go both ways: some faster than the baseline, some slower."""
        return self.verdicts.get("faster", 0) > 0 and self.verdicts.get("slower", 0) > 0

    def words(self) -> str:
        """`1.21× slower [1.17, 1.25] (geometric mean of 6 cells: 6 slower)`; where the cells go both ways, `mixed:
        1.64× slower to 22.0× faster (4 cells: 3 slower, 1 faster; geometric mean 1.65× faster [1.63, 1.67])`;
        unpaired: `1.18× slower (unpaired, 4 cells: 3 slower, 1 within the noise, geometric mean)`."""
        word = ratio(self.speedup).removesuffix(" than").removesuffix(" as")
        if self.paired and self.low == self.low:
            lo, hi = (self.low, self.high) if self.speedup >= 1 else (1 / self.high, 1 / self.low)
            word += f" [{lo:.2f}, {hi:.2f}]"
        n = len(self.cells) or sum(self.verdicts.values())
        counts = ", ".join(f"{k} {v}" for v, k in sorted(self.verdicts.items(), key=lambda x: -x[1]))
        cells = ("" if self.paired else "unpaired, ") + f"{n} cell{'s' if n != 1 else ''}" + (f": {counts}" if counts
                                                                                               else "")
        if self.mixed:
            ends = [ratio(x).removesuffix(" than").removesuffix(" as") for x in (min(self.cells), max(self.cells))]
            return f"mixed: {ends[0]} to {ends[1]} ({cells}; geometric mean {word})"
        return f"{word} (geometric mean of {cells})" if self.paired else f"{word} ({cells}, geometric mean)"


def shown_between(t: pd.DataFrame, variant: str, baseline: str) -> bool:
    """Whether two variants are one implementation (one framework) or shown to compute the same function."""
    rows = t[t["label"].isin([variant, baseline])] if "label" in t else t[t["variant"].isin([variant, baseline])]
    parity = rows["parity"] if "parity" in rows else pd.Series("ok", index=rows.index)
    return rows["framework"].nunique() <= 1 or bool((parity.fillna("ok") == "ok").all())


def overall(t: pd.DataFrame, baseline: str = DEFAULT_BASELINE, evidence: Sequence[Evidence] = ()) -> list[Overall]:
    """Per variant and op, the geometric mean of its speedups over every model and batch size: paired, against the
    variant it was compared with, with the interval its trials give (`stats.geomean` over the sweep's
    `evidence`); unpaired, against `baseline`, the geometric mean of the medians' ratios."""
    out = []
    for variant, base, op in sorted({(e.variant, e.baseline, e.op) for e in evidence}):
        cells = [e for e in evidence if (e.variant, e.baseline, e.op) == (variant, base, op)]
        r, lo, hi = geomean(cells)
        verdicts = dict(Counter(str(e.verdict) for e in cells))
        own = tuple(math.exp(-float(np.mean(e.log_ratios))) for e in cells)
        out.append(Overall(variant, base, op, 1 / r, 1 / hi, 1 / lo, True, shown_between(t, variant, base),
                           verdicts, own))
    s = speedups(t, baseline) if not t.empty else pd.DataFrame(columns=["variant", "paired"])
    known = {(o.variant, o.op) for o in out}
    for (variant, op), g in s[s["variant"] != baseline].groupby(["variant", "op"], sort=True):
        if (variant, op) in known:
            continue
        paired = bool(g["paired"].all())  # paired, its trials' evidence not at hand: no interval
        verdicts = dict(Counter(g["verdict"].fillna("no verdict"))) if paired and "verdict" in g else \
            dict(Counter(np.where(~g["sure"], "within the noise", np.where(g["speedup"] > 1, "faster", "slower"))))
        out.append(Overall(variant, baseline, op, float(math.exp(g["speedup"].map(math.log).mean())), math.nan,
                           math.nan, paired, bool(g["shown"].all()), verdicts, tuple(g["speedup"])))
    return out


def geomeans(t: pd.DataFrame, baseline: str = DEFAULT_BASELINE,
             evidence: Sequence[Evidence] = ()) -> list[tuple[str, str, float]]:
    """(variant, op, the geometric-mean speedup against the baseline over every model and batch size)."""
    return [(o.variant, o.op, o.speedup) for o in overall(t, baseline, evidence)]


MAX_NAME = 250  # the longest metric name MLflow takes


def metric_name(variant: str, op: str, baseline: str, suffix: str = "") -> str:
    """`speedup_<op>_<variant>_vs_<baseline><suffix>`: op first, so that the runs table's columns (sorted by name)
    group by op, and the baseline named, since `report.baseline` may change between sweeps. A name longer than MLflow
    takes (labels that hold interpreters' long paths) keeps its start and its end around a hash of the whole: still
    one name per variant, op and baseline."""
    name = re.sub(r"[^\w\-.:/]", "_", f"speedup_{op}_{variant}_vs_{baseline}")  # what MLflow allows in a name
    if len(name) + len(suffix) > MAX_NAME:
        keep = (MAX_NAME - len(suffix) - 12) // 2
        name = f"{name[:keep]}..{hashlib.sha256(name.encode()).hexdigest()[:8]}..{name[-keep:]}"
    return name + suffix


def metrics(t: pd.DataFrame, baseline: str = DEFAULT_BASELINE, evidence: Sequence[Evidence] = ()) -> dict[str, float]:
    """The parent's metrics (the runs table's columns; above 1: faster), to 4 significant digits (its 100 px
    columns show `0.5435`): per variant and op the geometric mean with, paired, its interval (`_ci95_low`,
    `_ci95_high`); and each cell's own paired speedup (`speedup_<op>_bs<N>_<model>_<variant>_vs_<baseline>`) with
    its minimum detectable effect (`_mde`: the smallest time ratio its trials could have called slower)."""
    out = {}
    for o in overall(t, baseline, evidence):
        out |= {metric_name(o.variant, o.op, o.baseline, suffix): float(f"{v:.4g}")
                for suffix, v in (("", o.speedup), ("_ci95_low", o.low), ("_ci95_high", o.high)) if v == v}
    for e in evidence:
        r = math.exp(float(np.mean(e.log_ratios)))
        out[metric_name(e.variant, f"{e.op}_bs{e.batch_size}_{e.model}", e.baseline)] = float(f"{1 / r:.4g}")
        if e.judged is not None and e.judged.mde == e.judged.mde:
            out[metric_name(e.variant, f"{e.op}_bs{e.batch_size}_{e.model}", e.baseline, "_mde")] = float(
                f"{e.judged.mde:.4g}")
    return out


def environment(runs: pd.DataFrame) -> dict[str, str]:
    """The sweep's environment from its point runs' tags (several values joined: e.g. one fingerprint per job)."""
    out = {}
    for key in ENVIRONMENT:
        col = f"tags.{key}"
        if col in runs:
            values = sorted({str(v) for v in runs[col].dropna() if str(v) not in ("", "n/a")})
            if values:
                out[key] = ", ".join(values)
    return out


def peak(runs: pd.DataFrame) -> tuple[dict[str, float], dict[str, str]]:
    """The sweep's MFU peak (its points' highest: a later point may have raised it) and where it came from, as the
    parent's metric and tag."""
    if "metrics.peak_tflops" not in runs or runs["metrics.peak_tflops"].isna().all():
        return {}, {}
    top = runs.loc[runs["metrics.peak_tflops"].idxmax()]
    return {"peak_tflops": float(top["metrics.peak_tflops"])}, {"peak_source": str(top.get("tags.peak_source", ""))}


def environment_line(env: dict[str, str]) -> str:
    """device (CPU) · jax 0.10.2, torch 2.13.0+cpu, ... · nnbench <commit>."""
    where = env.get("device_name", "?")
    if "cpu" in where.split(", ") and "cpu_model" in env:
        where = where.replace("cpu", f"cpu ({env['cpu_model']})")
    versions = ", ".join(f"{k.removesuffix('_version')} {env[k]}" for k in VERSIONS if k in env)
    return f"{where} · {versions} · nnbench {env.get('nnbench_git_commit', 'unknown')[:7]}"


def headline(t: pd.DataFrame, baseline: str, evidence: Sequence[Evidence] = ()) -> str:
    """The answer in one plain line, numbers first: `jax-jit fp32 vs torch-eager fp32: inference 1.21× slower [1.17,
    1.25] (geometric mean of 4 cells: 4 slower), training ...`; an op whose cells go both ways is `mixed`, with the
    range of its cells (`Overall.words`). The runs table's Description column shows a description's first 50
    characters, raw (so no Markdown here); the run page shows it above the summary table."""
    means = overall(t, baseline, evidence)
    if not means:
        return f"no variant to set against the baseline {baseline}"
    by_variant: dict[tuple[str, str], list[str]] = {}
    for o in means:
        by_variant.setdefault((o.variant, o.baseline), []).append(f"{o.op} {o.words()}" +
                                                                 ("" if o.shown else f" {UNSHOWN}"))
    return "; ".join(f"{variant} vs {base}: {', '.join(ops)}" for (variant, base), ops in by_variant.items())


def slower(t: pd.DataFrame, baseline: str) -> list[str]:
    """The cells where a variant is slower than the baseline, paired: `lenet inference bs32 jax-jit fp32 1.51×
    slower [1.47, 1.55]` (what report.fail_on_regression names)."""
    s = speedups(t, baseline)
    s = s[s["paired"] & (s["variant"] != baseline) & (s.get("verdict") == "slower")]
    return [f"{r.model} {r.op} bs{r.batch_size} {r.variant} {1 / r.speedup:.2f}× slower [{1 / r.speedup_high:.2f}, "
            f"{1 / r.speedup_low:.2f}]" for r in s.itertuples()]


def unmeasured(runs: pd.DataFrame) -> list[str]:
    """`<run name> <op>: <why>` for every op the load rule left without a number (tag unmeasured_reason_<op>)."""
    return [f"{r['tags.mlflow.runName']} {c.removeprefix('tags.unmeasured_reason_')}: {r[c]}"
            for c in runs.columns if c.startswith("tags.unmeasured_reason_") for _, r in runs[runs[c].notna()].iterrows()]


def note(t: pd.DataFrame, runs: pd.DataFrame, baseline: str, counts: str, artifacts: list[str],
         evidence: Sequence[Evidence] = ()) -> str:
    """The parent run's description (Markdown): the headline, the table right under it (so its top shows before
    "Show more"), the sentences, how it was compared and what else differs, the flags' meaning, the machine, the
    artifacts."""
    s = summary(t, baseline)
    out = [headline(t, baseline, evidence), "", markdown(s), ""]
    out += [f"- {line}" for line in sentences(t, baseline)] + [""]
    out += design(runs, baseline) + [""]
    if not s["speedup_shown"].fillna(True).all():
        out.append(f"{UNSHOWN_LEGEND}.")
    flagged = {f: int(s[f].sum()) for f in FLAGS if f in s and s[f].any()}
    if flagged:
        out.append("Flags: " + "; ".join(f"{n} {f.upper()}" for f, n in flagged.items()) + " (NOISY: other processes "
                   "used the CPU while it was measured; UNSTABLE: a re-run may read far from this run; OVERSUBSCRIBED: "
                   "its threads outnumbered the cores free, see the tag oversubscribed_<op>).")
    out += [f"Unmeasured on this machine: {line}." for line in unmeasured(runs)]
    top, source = peak(runs)
    if top:
        out.append(f"MFU: each point's FLOP/s over {top['peak_tflops']:.3g} TFLOP/s, one peak for every framework "
                   f"({source['peak_source']}).")
    out += [f"Points: {counts}. A median's interval is where a re-run of the point is expected to read (95%).", "",
            f"Environment: {environment_line(environment(runs))}", "",
            "Artifacts: " + ", ".join(f"`{a}`" for a in artifacts)]
    return "\n".join(out)


# How a paired cell's variants took turns, by the points' tag `paired_design` (harness/designs.py); a store's points
# from before it was recorded took turns in bursts.
TURNS = {"bursts": "took turns in short bursts of warm workers, the idle ones stopped",
         "in-process": "took turns in short bursts inside one warm worker per environment",
         "alternating": "ran as whole workers one after another in each trial"}


def design(runs: pd.DataFrame, baseline: str) -> list[str]:
    """How the speedups were measured, and, per variant compared paired, how it took turns with the baseline and what
    differs from it besides the variant (the point runs' tags `paired_design`, `differs`); the hosts, where the
    points ran on more than one."""
    tags = lambda key: runs[f"tags.{key}"] if f"tags.{key}" in runs else pd.Series(dtype=object)  # noqa: E731
    out = []
    if (tags("design") == "paired").any():
        used = {d for v in tags("paired_design").dropna() for d in v.split("+")} or {"bursts"}
        out.append(f"Paired: each cell's variants {'; or '.join(TURNS[d] for d in TURNS if d in used)}, on one "
                   f"machine, in fresh trials; a speedup's interval (95%) and verdict come from its trials (in "
                   f"parentheses: neither slower nor faster). Against {baseline}, besides the variant:")
        on = (tags("compared_with") == baseline) & tags("differs").notna()
        turns = tags("paired_design").reindex(runs.index).fillna("bursts")
        for variant, g in runs[on].groupby(runs["params.mode"] + " " + runs["params.precision"], sort=True):
            how = f" ({', '.join(sorted(set(turns[g.index])))})" if used != {"bursts"} else ""  # else said once
            out.append(f"- {variant}{how}: {'; '.join(sorted(set(g['tags.differs'])))}")
    if (tags("design") == "unpaired").any():
        out.append("Unpaired: where a speedup says so, its variants were measured one after another (an external "
                   "runner times itself): drift between them is part of it, and its parentheses mean that the two "
                   "points' intervals overlap.")
    hosts = sorted(set(tags("host").dropna()))
    if len(hosts) > 1:
        out.append(f"Hosts: {', '.join(hosts)}: a paired speedup's variants ran on one host; an unpaired one may "
                   "divide two hosts.")
    return out

"""A sweep's answer in words and numbers, for its parent run: which variant is faster for each point, by how much
and how sure, as sentences, the summary table and the machine in one line (the run's Markdown description), with
the geometric-mean speedups as metrics. Parent side."""
from __future__ import annotations

import math

import pandas as pd

from experiments.common.config import DEFAULT_BASELINE
from experiments.common.columns import FLAGS
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
    unsure = (~g["sure"]).sum()
    noise = (f" ({unsure} of {len(g)} within the noise)" if unsure and len(g) > 1
             else " (within the noise)" if unsure else "") + ("" if g["shown"].all() else f" {UNSHOWN}")
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


def sentences(t: pd.DataFrame, baseline: str = DEFAULT_BASELINE) -> list[str]:
    """Per model and op, one sentence per variant giving its range of speedups against the baseline."""
    s = speedups(t, baseline)
    s = s[s["variant"] != baseline]
    return [f"{model} {sentence(op, variant, baseline, g)}"
            for (model, op, variant), g in s.groupby(["model", "op", "variant"], sort=True)]


def geomeans(t: pd.DataFrame, baseline: str = DEFAULT_BASELINE) -> list[tuple[str, str, float]]:
    """(variant, op, the geometric-mean speedup against the baseline over every model and batch size)."""
    return [(variant, op, v) for variant, op, v, _ in shown_geomeans(t, baseline)]


def shown_geomeans(t: pd.DataFrame, baseline: str = DEFAULT_BASELINE) -> list[tuple[str, str, float, bool]]:
    """`geomeans`, each with whether every speedup in it is between implementations shown to compute the same
    function (parity ok, or one framework against itself)."""
    s = speedups(t, baseline)
    s = s[s["variant"] != baseline]
    return [(variant, op, float(math.exp(g["speedup"].map(math.log).mean())), bool(g["shown"].all()))
            for (variant, op), g in s.groupby(["variant", "op"], sort=True)]


def metric_name(variant: str, op: str, baseline: str) -> str:
    """`speedup_<op>_<variant>_vs_<baseline>`: op first, so that the runs table's columns (sorted by name) group by
    op, and the baseline named, since `report.baseline` may change between sweeps."""
    return f"speedup_{op}_{variant}_vs_{baseline}".replace(" ", "_")


def metrics(t: pd.DataFrame, baseline: str = DEFAULT_BASELINE) -> dict[str, float]:
    """The geometric means as the parent's metrics (above 1: faster), to 4 significant digits: the runs table's
    100 px columns show `0.5435`, not `0.54352867...`, and a point's 95% interval is wider than 0.1% anyway."""
    return {metric_name(variant, op, baseline): float(f"{v:.4g}") for variant, op, v in geomeans(t, baseline)}


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


def environment_line(env: dict[str, str]) -> str:
    """device (CPU) · jax 0.10.2, torch 2.13.0+cpu, ... · nnbench <commit>."""
    where = env.get("device_name", "?")
    if "cpu" in where.split(", ") and "cpu_model" in env:
        where = where.replace("cpu", f"cpu ({env['cpu_model']})")
    versions = ", ".join(f"{k.removesuffix('_version')} {env[k]}" for k in VERSIONS if k in env)
    return f"{where} · {versions} · nnbench {env.get('nnbench_git_commit', 'unknown')[:7]}"


def headline(t: pd.DataFrame, baseline: str) -> str:
    """The answer in one plain line, numbers first: `jax-jit fp32: inference 1.12× slower, training 1.35× faster (vs
    torch-eager fp32, geometric means)`. The runs table's Description column shows a description's first 50
    characters, raw (so no Markdown here); the run page shows it above the summary table."""
    means = shown_geomeans(t, baseline)
    if not means:
        return f"no variant to set against the baseline {baseline}"
    by_variant: dict[str, list[str]] = {}
    for variant, op, v, shown in means:
        word = ratio(v).removesuffix(" than").removesuffix(" as") + ("" if shown else f" {UNSHOWN}")
        by_variant.setdefault(variant, []).append(f"{op} {word}")
    return "; ".join(f"{variant}: {', '.join(ops)}" for variant, ops in by_variant.items()) + \
        f" (vs {baseline}, geometric means)"


def unmeasured(runs: pd.DataFrame) -> list[str]:
    """`<run name> <op>: <why>` for every op the load rule left without a number (tag unmeasured_reason_<op>)."""
    return [f"{r['tags.mlflow.runName']} {c.removeprefix('tags.unmeasured_reason_')}: {r[c]}"
            for c in runs.columns if c.startswith("tags.unmeasured_reason_") for _, r in runs[runs[c].notna()].iterrows()]


def note(t: pd.DataFrame, runs: pd.DataFrame, baseline: str, counts: str, artifacts: list[str]) -> str:
    """The parent run's description (Markdown): the headline, the table right under it (so its top shows before
    "Show more"), the sentences, the flags' meaning, the machine, the artifacts."""
    s = summary(t, baseline)
    out = [headline(t, baseline), "", markdown(s), ""]
    out += [f"- {line}" for line in sentences(t, baseline)] + [""]
    if not s["speedup_shown"].fillna(True).all():
        out.append(f"{UNSHOWN_LEGEND}.")
    flagged = {f: int(s[f].sum()) for f in FLAGS if f in s and s[f].any()}
    if flagged:
        out.append("Flags: " + "; ".join(f"{n} {f.upper()}" for f, n in flagged.items()) + " (NOISY: other processes "
                   "used the CPU while it was measured; UNSTABLE: a re-run may read far from this run; OVERSUBSCRIBED: "
                   "its threads outnumbered the cores free, see the tag oversubscribed_<op>; a speedup in "
                   "parentheses lies within the two intervals).")
    out += [f"Unmeasured on this machine: {line}." for line in unmeasured(runs)]
    out += [f"Points: {counts}. Speedups against {baseline}; the interval is where a re-run of the point is "
            "expected to read (95%).", "", f"Environment: {environment_line(environment(runs))}", "",
            "Artifacts: " + ", ".join(f"`{a}`" for a in artifacts)]
    return "\n".join(out)

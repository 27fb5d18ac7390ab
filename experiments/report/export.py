"""A store's medians as seed 000's TIMING/METADATA lines (what `nnbench export --format timing` prints): one TIMING
line per framework × model × operation × batch size (the median per call; replicates get the median of their
medians) and the METADATA lines the SciML page reads (`JAX device`, `PyTorch device`, `JAX version`, `PyTorch version`).
Frameworks are named as seed 000 names them: `JAX` (jit), `PyTorch` (eager); other variants `JAX-eager`,
`PyTorch-compile`; a precision other than fp32 is appended (`JAX-bf16`); an external framework's name passes through.
"""
from __future__ import annotations

import pandas as pd

from experiments.common.errors import BadInput
from experiments.common.frameworks import names, traits
from experiments.common.lines import Timing, format_metadata, format_timing
from experiments.report.tables import points

FORMATS = ("timing",)
KEY = ["name", "model", "op", "batch_size"]  # a TIMING line's key


def framework_name(mode: str, precision: str) -> str:
    """`jax-jit` fp32 is seed 000's `JAX`, `torch-compile` bf16 is `PyTorch-compile-bf16`, `Lux` stays `Lux`."""
    framework, _, variant = mode.partition("-")
    if framework in names():  # seed 000's name for it, plain in the variant the seed runs
        t = traits(framework)
        mode = t.seed_name if variant == t.seed_variant else f"{t.seed_name}-{variant}"
    return mode if precision == "fp32" else f"{mode}-{precision}"


def device_text(device: str, name) -> str:
    """params.device plus tags.device_name where it adds something: `cpu`, `cuda:0 (NVIDIA H200)`."""
    return device if pd.isna(name) or name == device else f"{device} ({name})"


def lines(t: pd.DataFrame) -> list[str]:
    """METADATA, then TIMING lines sorted by key, from `report.tidy` rows."""
    t = t.assign(name=[framework_name(m, p) for m, p in zip(t["mode"], t["precision"])])
    p = points(t)  # one row per point (variant, device, ...): replicates folded
    p["name"] = [framework_name(m, prec) for m, prec in zip(p["mode"], p["precision"])]
    clash = p[p.duplicated(KEY, keep=False)]
    if not clash.empty:
        r = clash.iloc[0]
        devices = sorted(clash.loc[(clash[KEY] == r[KEY]).all(axis=1), "device"].unique())
        raise BadInput(f"{r['name']} {r.model} {r.op} bs{r.batch_size} comes from more than one point "
                          f"(on {' and '.join(devices)}): select one, e.g. device={r.device}")
    meta: dict[str, str] = {}
    for name, g in t.groupby("name", sort=True):
        names = g["device_name"] if "device_name" in g else [None] * len(g)
        meta[f"{name} device"] = ", ".join(sorted({device_text(d, n) for d, n in zip(g["device"], names)}))
        tag = f"{g['framework'].iloc[0]}_version"
        versions = sorted(g[tag].dropna().astype(str).unique()) if tag in g else []
        if len(versions) > 1:
            raise BadInput(f"the {name} runs hold {tag} {' and '.join(versions)}: select one, "
                              f"e.g. {tag}={versions[-1]}")
        if versions:
            meta[f"{name} version"] = versions[0]
    timings = [Timing(r["name"], r.model, r.op, int(r.batch_size), float(r.median_s))
               for _, r in p.sort_values(KEY).iterrows()]
    return [format_metadata(k, v) for k, v in meta.items()] + [format_timing(x) for x in timings]

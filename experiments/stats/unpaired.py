"""The unpaired verdict: did a change make a point faster or slower, from each side's processes? One verdict for
history, bisect and calibrate. Parent side.

The unit of evidence is one measuring process: its median per call. Calls inside one process are not independent
of that process's state (processes of the same point settle 10-60% apart on a shared machine), so a test on
pooled calls calls drift a change. Per comparison:

- the ratio new/old is the geometric mean ratio of the per-process medians;
- its interval is Welch's t interval on their logs (unequal spreads, Welch-Satterthwaite degrees of freedom);
- its p-value is Welch's t test on the same logs; where several comparisons are judged at once, the p-values
  become Benjamini-Hochberg q-values (scipy's `false_discovery_control`), which keeps the expected share of false
  alarms among the changes reported at `alpha`;
- the verdict is *slower* (*faster*) when q < alpha and the ratio is beyond 1 ± threshold, else *no change*;
  *no verdict* when a side has fewer than two processes (one process can't show the drift between processes).

`nnbench calibrate` measures the false-alarm rate of this rule on A/A pairs and its detection rate on planted
slowdowns (docs/comparing.md).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from experiments.stats.verdicts import ALPHA, THRESHOLD, Verdict, changed, q_values


@dataclass(frozen=True)
class Comparison:
    """One comparison of new against old, from their per-process medians."""

    ratio: float  # geometric mean of the new process medians over the old ones: > 1 is slower
    ci_low: float  # the ratio's 95% interval (Welch)
    ci_high: float
    p_value: float  # Welch's t test on log process medians (nan: too few processes)
    q_value: float  # p adjusted over the comparisons judged together (Benjamini-Hochberg)
    verdict: Verdict
    processes_old: int
    processes_new: int


def process_medians(entry: dict) -> list[float]:
    """An op's samples.json entry as one median per measuring process (runs of old: one process)."""
    runs = [p["samples_s"] for p in entry["processes"]] if "processes" in entry else [entry["samples_s"]]
    return [float(np.median(r)) for r in runs]


def welch(old: Sequence[float], new: Sequence[float], confidence: float = 0.95) -> tuple[float, float, float, float]:
    """(ratio, interval low, interval high, p) of new/old from per-process medians; nan where a side has < 2."""
    a, b = np.log(np.asarray(old, dtype=float)), np.log(np.asarray(new, dtype=float))
    d = float(b.mean() - a.mean())
    if len(a) < 2 or len(b) < 2:
        return math.exp(d), math.nan, math.nan, math.nan
    va, vb = a.var(ddof=1) / len(a), b.var(ddof=1) / len(b)
    se = math.sqrt(va + vb)
    if se == 0:  # identical processes on both sides: the difference is all there is
        return math.exp(d), math.exp(d), math.exp(d), float(d == 0)
    df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
    from scipy import stats  # scipy takes most of a second to import: not for the commands' --help and errors
    half = float(stats.t.ppf(0.5 + confidence / 2, df)) * se
    p = float(2 * stats.t.sf(abs(d) / se, df))
    return math.exp(d), math.exp(d - half), math.exp(d + half), p


def judge(pairs: Sequence[tuple[Sequence[float], Sequence[float]]], threshold: float = THRESHOLD,
          alpha: float = ALPHA) -> list[Comparison]:
    """A comparison per (old, new) pair of per-process medians, the pairs judged together (one BH family)."""
    tests = [welch(old, new, 1 - alpha) for old, new in pairs]
    qs = q_values([p for *_, p in tests])
    out = []
    for (old, new), (ratio, lo, hi, p), q in zip(pairs, tests, qs):
        verdict = Verdict.UNKNOWN if math.isnan(q) else changed(ratio, q, threshold, alpha) or Verdict.SAME
        out.append(Comparison(ratio, lo, hi, p, float(q), verdict, len(old), len(new)))
    return out

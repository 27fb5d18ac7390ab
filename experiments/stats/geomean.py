"""A geometric mean of paired cells' time ratios, with its interval: what the sweep's answer says per variant and op.
Parent side."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from experiments.common.protocol import Json
from experiments.stats.paired import PairedComparison
from experiments.stats.verdicts import Verdict


@dataclass(frozen=True)
class Evidence(Json):
    """One variant against its baseline on one cell of a paired sweep, trial by trial: what a geometric mean over
    cells is made of. `group`: the cells measured in the same trials (one group of jobs)."""

    group: str
    model: str
    op: str
    batch_size: int
    variant: str
    baseline: str
    trials: list[int]
    log_ratios: list[float]  # log(variant time / baseline time), one per trial
    judged: PairedComparison | None = None  # the cell's judgement, with the sweep's other cells
    set_aside: list[str] = field(default_factory=list)  # trials left out of the judgement, each with why

    @property
    def verdict(self) -> Verdict:
        return self.judged.verdict if self.judged is not None else Verdict.UNKNOWN

    @staticmethod
    def upgraded(fields: dict) -> dict:
        """Its JSON as this nnbench reads it: an older sweep's (a plain `verdict` and `interval`, no `judged`) with
        those as its judgement, the numbers it did not keep (p, q, the look) not known."""
        if "judged" in fields or "verdict" not in fields:
            return fields
        ratio, (low, high) = math.exp(float(np.mean(fields["log_ratios"]))), fields.get("interval") or [math.nan] * 2
        judged = PairedComparison(ratio, low, high, math.nan, math.nan, fields["verdict"] or str(Verdict.UNKNOWN),
                                  len(fields["log_ratios"]))
        return {k: v for k, v in fields.items() if k not in ("verdict", "interval")} | {"judged": vars(judged)}


def geomean(cells: Sequence[Evidence], confidence: float = 0.95) -> tuple[float, float, float]:
    """The geometric-mean time ratio over the cells (variant over baseline) and its interval (nan: under two trials).

    The cells of one group were measured by the same processes, so a process's own bias moves all of them together:
    a group is averaged trial by trial (its trials that measured every one of its cells) and its interval comes from
    the spread of those trial means. Groups (other models, other batch sizes) are independent, weighted by their
    cells; Welch-Satterthwaite gives the degrees of freedom."""
    groups: dict[str, list[Evidence]] = {}
    for c in cells:
        groups.setdefault(c.group, []).append(c)
    means, variances, dfs, weights = [], [], [], []
    for g in groups.values():
        common = set.intersection(*(set(c.trials) for c in g))
        by_trial = [float(np.mean([c.log_ratios[c.trials.index(t)] for c in g])) for t in sorted(common)]
        if not by_trial:
            return math.nan, math.nan, math.nan
        means.append(float(np.mean(by_trial)))
        variances.append(float(np.var(by_trial, ddof=1)) / len(by_trial) if len(by_trial) > 1 else math.nan)
        dfs.append(len(by_trial) - 1)
        weights.append(len(g))
    w = np.asarray(weights, dtype=float) / sum(weights)
    d, parts = float(np.dot(w, means)), w**2 * np.asarray(variances)
    var = float(parts.sum())
    if not math.isfinite(var):
        return math.exp(d), math.nan, math.nan
    if var == 0:
        return math.exp(d), math.exp(d), math.exp(d)
    df = var**2 / float(sum(p**2 / k for p, k in zip(parts, dfs) if p > 0))
    from scipy.special import stdtrit  # as in paired_t
    half = float(stdtrit(df, 0.5 + confidence / 2)) * math.sqrt(var)
    return math.exp(d), math.exp(d - half), math.exp(d + half)

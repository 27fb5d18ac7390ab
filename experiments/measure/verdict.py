"""Did a change make a point faster or slower? One verdict for history, bisect and calibrate. Parent side.

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

Paired comparisons (harness/pairs.py: warm workers taking turns in bursts) are judged by `judge_pairs`: the unit of
evidence is one fresh trial, its log ratio B/A; per cell, Student's t interval over the trials' log ratios, and a
one-sample t test of them; Benjamini-Hochberg over the cells judged together. A cell is judged again after each
trial it gets while unsettled (`Looks`), so each look is judged at the level that keeps `alpha` over all of them
(`look_level`, a Pocock boundary for Student's t), and its spread is never taken below what each trial's own rounds
leave uncertain (`judge_pairs`' floors). *slower* (*faster*) when q < that level and the ratio is beyond
1 ± threshold; *no change* only when the whole interval lies inside 1 ± threshold; *inconclusive* otherwise (more
trials may settle it); *no verdict* below two trials.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from experiments.common.config import ALPHA, PAIRED_THRESHOLD, StrEnum  # noqa: F401  (they are the verdicts')
from experiments.common.protocol import Json

THRESHOLD = 0.05  # the unpaired verdict's


class Verdict(StrEnum):
    """What a comparison of new against old says, in the words tables and the console print."""

    SLOWER = "slower"
    FASTER = "faster"
    SAME = "no change"
    INCONCLUSIVE = "inconclusive"  # paired: neither beyond the threshold nor inside it; more pairs may settle it
    UNKNOWN = "no verdict"  # a side has fewer than two processes (pairs)

    @property
    def changed(self) -> bool:
        return self in (Verdict.SLOWER, Verdict.FASTER)


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


def changed(ratio: float, q: float, threshold: float, alpha: float) -> Verdict | None:
    """slower or faster where q < alpha and the ratio lies beyond 1 ± threshold; else None."""
    if q < alpha and ratio > 1 + threshold:
        return Verdict.SLOWER
    if q < alpha and ratio < 1 - threshold:
        return Verdict.FASTER
    return None


def rate(k: int, n: int) -> str:
    """k of n as a share with its exact (Clopper-Pearson) 95% interval: how the self-checks say an error rate."""
    if n == 0:
        return "no comparisons"
    from scipy.stats import binomtest  # as in welch

    lo, hi = binomtest(k, n).proportion_ci(0.95)
    return f"{k} of {n} = {k / n:.1%} [{lo:.1%}, {hi:.1%}]"


def q_values(ps: Sequence[float]) -> np.ndarray:
    """Benjamini-Hochberg q-values of the p-values judged together (nan stays nan: no test)."""
    ps = np.asarray(ps, dtype=float)
    qs = np.full(len(ps), math.nan)
    known = ~np.isnan(ps)
    if known.any():
        from scipy import stats  # as in welch
        qs[known] = stats.false_discovery_control(ps[known])
    return qs


@dataclass(frozen=True)
class PairedComparison:
    """One cell's paired comparison, B against A, from its trials' log ratios."""

    ratio: float  # B/A: exp of the mean of the trials' log ratios; > 1 is slower
    ci_low: float  # its interval (Student's t over the trials, on the log scale), the one the verdict used:
    ci_high: float  # at `confidence` at each look, 95% over all the looks together
    p_value: float  # one-sample t test of the log ratios against 0 (nan: fewer than two trials)
    q_value: float  # p adjusted over the cells judged together (Benjamini-Hochberg)
    verdict: Verdict
    pairs: int
    confidence: float = math.nan  # the interval's level at this look (`look_level`; nan: no interval)
    spread: float = math.nan  # the SD of the log ratios the interval used (its own, or its floor where larger)

    @property
    def conclusive(self) -> bool:
        """Whether more trials could not change it (harness/pairs.py adds trials until it is, up to a budget)."""
        return self.verdict in (Verdict.SLOWER, Verdict.FASTER, Verdict.SAME)

    @property
    def precision(self) -> float:
        """The half-width, as a fraction, of the ratio's plain 95% interval at this look (Student's t at its spread,
        the looks not counted): how precisely its trials have measured it, which the trial budget's target reads
        (bench.target_ratio_ci); the verdict reads the look's own, wider interval. inf below two trials."""
        if self.pairs < 2 or self.spread != self.spread:
            return math.inf
        from scipy.special import stdtrit  # as in paired_t
        return math.expm1(float(stdtrit(self.pairs - 1, 0.975)) * self.spread / math.sqrt(self.pairs))


@dataclass(frozen=True)
class Looks:
    """When a cell's trials are judged: first at `first` trials, then again after each further trial while the cell
    is unsettled, up to `last` (bench.processes and bench.max_processes)."""

    first: int = 1
    last: int = 1

    def level(self, alpha: float = ALPHA) -> float:
        """The two-sided level each look is judged at, so that all of them together keep `alpha`."""
        return look_level(max(self.first, 2), max(self.last, self.first, 2), alpha)


# Draws of Gaussian A/A cells that set a schedule's per-look level: its Monte-Carlo error moves the level's
# false-alarm rate by about ±0.1% (binomial SD at 5%), seeded, so every process computes the same level.
LOOK_DRAWS = 100_000
# Why Pocock's boundary (simulated 2026-12-07, the sweep's own rule over looks 5..12, 20,000 cells a row, trials
# spread 4%): judged at 5% per look, 6.7% of A/A cells ended slower or faster (14.0% at an 8% spread); Bonferroni's
# 5%/8 per look, 1.5% (2.3%), finding a planted 5% in 82% of cells; this level (1.5% per look), 3.1% (5.1%), finding
# it in 91%. Heavy-tailed trials (Student's t, 3 df) only lower each rate. docs/comparing.md#looking-again.


@functools.lru_cache(maxsize=None)
def look_level(first: int, last: int, alpha: float) -> float:
    """Pocock's boundary for Student's t: the per-look level at which a cell judged after `first`, `first` + 1, ...,
    `last` trials has its interval exclude the true ratio at any look in `alpha` of Gaussian cells. The interval then
    holds the truth at every look at once (a repeated confidence interval), so no rule for adding trials raises
    its false alarms; only the draws where a look rejects count, so the level is the `alpha` quantile of each draw's
    smallest p-value over the looks. Looks 5..12 (the default bench): 0.015."""
    if last <= first:
        return alpha
    from scipy.special import stdtr  # as in paired_t

    rng = np.random.default_rng(0)
    total, squares, smallest = np.zeros(LOOK_DRAWS), np.zeros(LOOK_DRAWS), np.ones(LOOK_DRAWS)
    for n in range(1, last + 1):
        x = rng.standard_normal(LOOK_DRAWS)
        total, squares = total + x, squares + x * x
        if n >= first:
            mean = total / n
            se = np.sqrt((squares - n * mean * mean) / (n - 1) / n)
            smallest = np.minimum(smallest, 2 * stdtr(n - 1, -np.abs(mean) / se))
    return float(np.quantile(smallest, alpha))


def paired_t(log_ratios: Sequence[float], confidence: float = 0.95,
             spread: float = 0.0) -> tuple[float, float, float, float]:
    """(ratio, interval low, interval high, p) of B/A from trials' log ratios; nan where there are fewer than two.
    `spread`: an SD the log ratios' own is raised to where it is smaller (`judge_pairs`' floors)."""
    x = np.asarray(log_ratios, dtype=float)
    d = float(x.mean()) if len(x) else 0.0
    if len(x) < 2:
        return math.exp(d), math.nan, math.nan, math.nan
    se = max(float(x.std(ddof=1)), spread) / math.sqrt(len(x))
    if se == 0:  # identical trials: the ratio is all there is
        return math.exp(d), math.exp(d), math.exp(d), float(d == 0)
    from scipy.special import stdtr, stdtrit  # as in welch; Student's t itself, 100× faster than scipy.stats.t's
    half = float(stdtrit(len(x) - 1, 0.5 + confidence / 2)) * se
    return math.exp(d), math.exp(d - half), math.exp(d + half), float(2 * stdtr(len(x) - 1, -abs(d) / se))


def judge_pairs(log_ratios: Sequence[Sequence[float]], threshold: float = PAIRED_THRESHOLD, alpha: float = ALPHA,
                looks: Looks = Looks(), floors: Sequence[float] = ()) -> list[PairedComparison]:
    """A verdict per cell from its trials' log ratios (B/A), the cells measured in the same trials judged together
    (one BH family), each at the level `looks` gives, its spread at least its `floors` entry (the trials' own
    rounds' uncertainty: `Compared.floor`; none given, 0)."""
    level, floors = looks.level(alpha), list(floors) or [0.0] * len(log_ratios)
    tests = [paired_t(x, 1 - level, floor) for x, floor in zip(log_ratios, floors)]
    out = []
    for x, floor, (ratio, lo, hi, p), q in zip(log_ratios, floors, tests, q_values([p for *_, p in tests])):
        inside = 1 - threshold <= lo and hi <= 1 + threshold
        verdict = (Verdict.UNKNOWN if math.isnan(q) else changed(ratio, q, threshold, level)
                   or (Verdict.SAME if inside else Verdict.INCONCLUSIVE))
        spread = max(float(np.std(x, ddof=1)), floor) if len(x) > 1 else math.nan
        out.append(PairedComparison(ratio, lo, hi, p, float(q), verdict, len(x), 1 - level if len(x) > 1 else math.nan,
                                    spread))
    return out


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
    verdict: str = ""  # the cell's, judged with the sweep's other cells
    set_aside: list[str] = field(default_factory=list)  # trials left out of the judgement, each with why
    interval: list[float] = field(default_factory=list)  # the ratio's interval the verdict used (none: one trial)


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

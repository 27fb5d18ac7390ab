"""The paired verdict, parent side. Paired comparisons (harness/pairs.py: warm workers taking turns in bursts) are
judged by `judge_pairs`: the unit of evidence is one fresh trial, its log ratio B/A; per cell, Student's t interval
over the trials' log ratios, and a one-sample t test of them; Benjamini-Hochberg over the cells judged together. A
cell is judged again after each trial it gets while unsettled (`Looks`), so each look is judged at the level that
keeps `alpha` over all of them (`look_level`, a Pocock boundary for Student's t), and its spread is never taken
below what each trial's own rounds leave uncertain (`judge_pairs`' floors). *slower* (*faster*) when q < that level
and the ratio is beyond 1 ± threshold; *no change* only when the whole interval lies inside 1 ± threshold;
*inconclusive* otherwise (more trials may settle it); *no verdict* below two trials.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from experiments.stats.looks import Looks
from experiments.stats.verdicts import ALPHA, PAIRED_THRESHOLD, Verdict, changed, q_values


# A judgement's numbers as the store names them (`<op>_<name>` on a point's run; `paired_<name>` in the reports'
# tables), in the order `PairedComparison.numbers` gives them: oriented as a speedup (above 1: faster).
PAIRED = ("speedup", "speedup_ci95_low", "speedup_ci95_high", "speedup_p_value", "speedup_q_value", "speedup_trials",
          "speedup_look_level", "speedup_spread", "mde")
# A judgement's columns in the comparisons' tables (`nnbench ab`, `versions`), after the cell's own
COLUMNS = ("B/A", "95% interval", "verdict", "pairs", "MDE")


@dataclass(frozen=True)
class PairedComparison:
    """One cell's paired comparison, B against A, from its trials' log ratios: its estimate (the time ratio B/A, its
    interval at the level the verdict used, p and q, the trials, the look's level, the spread used) and the judgement
    on it (`verdict`). Serialized only here: the store's numbers and tag (`numbers`, `read`), `--json` (`as_json`,
    `as_step`) and words (`said`, `brief`, `cells`); inside, the ratio is B/A, flipped to a speedup only in these."""

    ratio: float  # B/A: exp of the mean of the trials' log ratios; > 1 is slower
    ci_low: float  # its interval (Student's t over the trials, on the log scale), the one the verdict used:
    ci_high: float  # at `confidence` at each look, 95% over all the looks together
    p_value: float  # one-sample t test of the log ratios against 0 (nan: fewer than two trials)
    q_value: float  # p adjusted over the cells judged together (Benjamini-Hochberg)
    verdict: Verdict
    pairs: int
    confidence: float = math.nan  # the interval's level at this look (`look_level`; nan: no interval)
    spread: float = math.nan  # the SD of the log ratios the interval used (its own, or its floor where larger)
    # the minimum detectable effect: the smallest ratio B/A its trials could have called slower at this look's level,
    # max(1 + threshold, the interval's half-width ×); A/B, mirrored, for faster (nan: one trial)
    mde: float = math.nan

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

    @property
    def known(self) -> bool:
        """Whether it has an interval (two trials or more)."""
        return self.ci_low == self.ci_low

    def speedup(self) -> tuple[float, float, float]:
        """A's time over B's (above 1: B is faster) and its interval: the one place the ratio is turned over."""
        return 1 / self.ratio, 1 / self.ci_high, 1 / self.ci_low

    def numbers(self) -> dict[str, float]:
        """The numbers by their store names (PAIRED); one not known (NaN: a single trial) is left out."""
        values = (*self.speedup(), self.p_value, self.q_value, self.pairs, self.confidence, self.spread, self.mde)
        return {k: float(v) for k, v in zip(PAIRED, values) if v == v}

    @classmethod
    def read(cls, verdict: str, numbers: Mapping[str, float]) -> PairedComparison:
        """A judgement back from its verdict's tag and its numbers by store name (`numbers`, as written)."""
        n = {k: float(numbers.get(k, math.nan)) for k in PAIRED}
        trials = n["speedup_trials"]
        return cls(1 / n["speedup"], 1 / n["speedup_ci95_high"], 1 / n["speedup_ci95_low"], n["speedup_p_value"],
                   n["speedup_q_value"], Verdict(verdict), int(trials) if trials == trials else 0,
                   n["speedup_look_level"], n["speedup_spread"], n["mde"])

    def as_json(self) -> dict:
        """A cell's fields in `--json` (docs/comparing.md#the-json): the speedup with its interval (`low`, `high`),
        the verdict, the trials, the ratio B/A with its `interval`, and the `mde`; null where not known (one trial)."""
        speedup, low, high = self.speedup()
        return {"speedup": speedup, "low": low if self.known else None, "high": high if self.known else None,
                "verdict": str(self.verdict), "trials": self.pairs, "ratio": self.ratio,
                "interval": [self.ci_low, self.ci_high] if self.known else [None, None],
                "mde": self.mde if self.mde == self.mde else None}

    def as_step(self) -> dict:
        """A bisect step's fields in `--json`: the ratio B/A, its interval, the verdict, the pairs, the MDE."""
        cell = self.as_json()
        return {"ratio": cell["ratio"], "interval": cell["interval"], "verdict": cell["verdict"], "pairs": self.pairs,
                "mde": cell["mde"]}

    def said(self) -> str:
        """In words, its interval on the same side: `1.51× slower [1.47, 1.55]`, `1.22× faster [1.18, 1.26]`,
        `1.01× slower [0.99, 1.03], no change`, each with its MDE (`, MDE ×1.05`; the console's line)."""
        r, lo, hi, word = self.ratio, self.ci_low, self.ci_high, "slower"
        if r < 1:
            (r, lo, hi), word = self.speedup(), "faster"
        if not self.known:
            return f"{r:.3g}× {word} (one trial: no interval)"
        return (f"{r:.3g}× {word} [{lo:.3g}, {hi:.3g}]" + ("" if self.verdict.changed else f", {self.verdict}")
                + f", MDE ×{self.mde:.3g}")

    def brief(self) -> str:
        """As a bisect's step says it: `×1.510 [1.470, 1.550], slower, 6 pairs, MDE ×1.050`."""
        interval = f" [{self.ci_low:.3f}, {self.ci_high:.3f}]" if self.known else ""
        ratio = f"×{self.ratio:.3f}" if math.isfinite(self.ratio) else "no ratio"
        mde = f", MDE ×{self.mde:.3f}" if self.known else ""
        return f"{ratio}{interval}, {self.verdict}, {self.pairs} pairs{mde}"

    def cells(self) -> list:
        """Its cells in a comparisons' table, one per COLUMNS."""
        return [f"{self.ratio:.3f}", f"[{self.ci_low:.3f}, {self.ci_high:.3f}]" if self.known else "",
                str(self.verdict), self.pairs, f"×{self.mde:.3f}" if self.known else ""]


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
        mde = max(1 + threshold, math.sqrt(hi / lo)) if len(x) > 1 else math.nan  # p < level: beyond the half-width
        out.append(PairedComparison(ratio, lo, hi, p, float(q), verdict, len(x), 1 - level if len(x) > 1 else math.nan,
                                    spread, mde))
    return out

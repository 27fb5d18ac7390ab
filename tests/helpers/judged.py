"""A paired judgement as the judge gives one, for tests that read one without judging trials: the time ratio B/A,
its interval, the verdict, the trials."""
import math

from experiments.stats.paired import PairedComparison
from experiments.stats.verdicts import Verdict


def judged(ratio: float, low: float = math.nan, high: float = math.nan, verdict: Verdict = Verdict.SAME,
           pairs: int = 5, mde: float = math.nan) -> PairedComparison:
    return PairedComparison(ratio, low, high, math.nan, math.nan, Verdict(verdict), pairs, mde=mde)

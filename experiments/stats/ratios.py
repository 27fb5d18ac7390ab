"""A paired trial's log ratio B/A from its rounds' bursts, and how far its rounds alone leave it uncertain. Parent
side."""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np


def round_log_ratios(a_bursts: Sequence[Sequence[float]], b_bursts: Sequence[Sequence[float]]) -> list[float]:
    """Per round, log(median of B's burst / median of A's): the pair's rounds one by one."""
    return [math.log(float(np.median(b)) / float(np.median(a))) for a, b in zip(a_bursts, b_bursts)]


def pair_log_ratio(a_bursts: Sequence[Sequence[float]], b_bursts: Sequence[Sequence[float]]) -> float:
    """A pair's log(B/A): the median of its per-round log ratios (each round's two bursts ran next to each other, so
    they share the machine's state of the moment).

    Robust to single slow bursts, which a mean of per-round ratios lets through, and to load that comes or goes
    within the pair, which moves the ratio of the medians of all A's and all B's bursts. In A/A pairs of torch LeNet
    bs32 inference (one intra-op thread) while other work used 1.3-1.5 of the 2 cores, the pairs' log ratios spread
    (SD) 3.4-5.3% by this estimate, 4.4-6.6% by the Hodges-Lehmann estimate of the round log ratios, 5.3-11.2% by
    the ratio of all bursts' medians and 6.0-12.5% by the mean of round ratios (28-46 pairs per burst length of
    20-200 ms; docs/comparing.md).
    """
    return float(np.median(round_log_ratios(a_bursts, b_bursts)))


def pair_log_ratio_se(a_bursts: Sequence[Sequence[float]], b_bursts: Sequence[Sequence[float]]) -> float:
    """How far a pair's log ratio (`pair_log_ratio`: the median of its rounds' log ratios) could read from its rounds
    alone: the median's standard error, 1.2533 × their robust SD (1.4826 × MAD) / √rounds (0 for one round). Trials
    of a cell can't agree better than this, whatever their luck: the paired verdict takes it as the least spread
    of their log ratios (`paired.judge_pairs`)."""
    r = np.asarray(round_log_ratios(a_bursts, b_bursts), dtype=float)
    if len(r) < 2:
        return 0.0
    return 1.2533 * 1.4826 * float(np.median(np.abs(r - np.median(r)))) / math.sqrt(len(r))


def pooled_log_ratio(a_bursts: Sequence[Sequence[float]], b_bursts: Sequence[Sequence[float]]) -> float:
    """log(B/A) from the median of all B's burst samples over the median of all A's (the self-check compares it)."""
    return math.log(float(np.median(np.concatenate(b_bursts))) / float(np.median(np.concatenate(a_bursts))))


def hodges_lehmann(xs: Sequence[float]) -> float:
    """The Hodges-Lehmann estimate of the center: the median of all pairwise means (Walsh averages, i <= j)."""
    x = np.asarray(xs, dtype=float)
    i, j = np.triu_indices(len(x))
    return float(np.median((x[i] + x[j]) / 2))

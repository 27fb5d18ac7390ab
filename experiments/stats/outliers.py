"""Processes and trials read far off while other programs ran (re-measured, or set aside), and points whose
processes disagree too far to be measured here. Parent side: it runs once a point's or a cell's results are in."""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np


# A point whose processes' medians lie this far apart is not measured on this machine: no interval over them means
# anything, however wide (a 5 ms point read [0.005, 5491] ms with one CPU hog running).
UNMEASURED_SPREAD = 10.0
# A process is re-measured when its median lies this far from its siblings' (and beyond `FAR_SDS` of their robust
# spread) while other processes used more than `BUSY_CORES` beside it: processes of one point read 20-70% apart
# here on a quiet machine, and a process beside another busy program read 2-100× slower.
FAR_FACTOR = 2.0
FAR_SDS = 3.0
BUSY_CORES = 0.2


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:.4g} ms"


def unmeasured(medians: Sequence[float]) -> str | None:
    """Why no interval is given for a point whose processes disagree by `UNMEASURED_SPREAD` or more; else None."""
    if len(medians) < 2 or max(medians) < UNMEASURED_SPREAD * min(medians):
        return None
    return (f"its processes disagree {max(medians) / min(medians):.0f}× ({ms(min(medians))} to {ms(max(medians))}): "
            "not measurable on this machine as it ran; close other programs, or measure on a quiet machine")


def to_replace(medians: Sequence[float], busy_cores: Sequence[float]) -> list[tuple[int, str]]:
    """The processes to re-measure, by index, each with the reason: a median far above its siblings' (at least
    `FAR_FACTOR` over the median of the others, and beyond `FAR_SDS` robust SDs of their log medians) while other
    processes used more than `BUSY_CORES` beside it. A far process on a quiet machine is the machine's own drift,
    and stays; the ones replaced stay in the raw data with their reason.

    Another program only ever slows a process: one far *below* its siblings is the one it disturbed least, and
    stays. (With one busy loop on 2 cores, four of torch LeNet bs2's processes read 79 ms and one 0.9 ms, the quiet
    machine's figure; measuring that one again only replaced it by another slowed one.)"""
    logs = np.log(np.asarray(medians, dtype=float))
    out = []
    for i, (m, busy) in enumerate(zip(medians, busy_cores)):
        if busy <= BUSY_CORES or len(logs) < 2:
            continue
        center, far = siblings(logs, i)
        if logs[i] - center > far:
            out.append((i, f"its median {ms(m)} is {math.exp(logs[i] - center):.1f}× above its siblings' "
                           f"{ms(math.exp(center))} while other processes used {busy:.2f} cores"))
    return out


def siblings(logs: np.ndarray, i: int) -> tuple[float, float]:
    """The median of the others' logs, and how far from it value i must lie to be far: log FAR_FACTOR, or FAR_SDS
    robust SDs (the MAD's) of the others where there are three or more."""
    others = np.delete(logs, i)
    center = float(np.median(others))
    sd = 1.4826 * float(np.median(np.abs(others - center))) if len(others) >= 3 else 0.0
    return center, max(math.log(FAR_FACTOR), FAR_SDS * sd)


def far_trials(log_ratios: Sequence[float], busy_cores: Sequence[float]) -> list[tuple[int, str]]:
    """The paired trials to set aside, by index, with the reason: the load rule (`to_replace`) on the trials' log
    ratios, either way (another program may slow either side), among three or more. One busy loop beside a 2-thread
    torch side of a sub-millisecond step read it 400× slower in that trial alone; on a quiet machine none is set
    aside."""
    logs = np.asarray(log_ratios, dtype=float)
    out = []
    for i, busy in enumerate(busy_cores):
        if busy <= BUSY_CORES or len(logs) < 3:
            continue
        center, far = siblings(logs, i)
        if abs(logs[i] - center) > far:
            out.append((i, f"its ratio {math.exp(logs[i]):.3g} is {math.exp(abs(logs[i] - center)):.1f}× off its "
                           f"siblings' {math.exp(center):.3g} while other processes used {busy:.2f} cores"))
    return out

"""An unpaired bisect step in-process (compare.bisection_unpaired): each version's level is its processes' medians,
and a probe is judged against the last version at the start's level by Welch's t on them, said in one line."""
from types import SimpleNamespace

import numpy as np
import pandas as pd

from experiments.compare import bisection_unpaired
from experiments.compare.bisection_unpaired import Level, UnpairedSteps

VERSIONS = ["1.0", "1.1", "1.2"]


def level(median: float, rng) -> Level:
    """Five processes of 20 samples around `median`, in two runs."""
    procs = [list(median * rng.lognormal(0, 0.01, 20)) for _ in range(5)]
    return Level(pd.DataFrame(), {"run-a": procs[:2], "run-b": procs[2:]})


def steps(levels: dict[str, float]) -> tuple[UnpairedSteps, list[str]]:
    said: list[str] = []
    r = SimpleNamespace(versions=VERSIONS, say=said.append)
    job = SimpleNamespace(points=[SimpleNamespace(ops=("inference",))])
    s = UnpairedSteps(SimpleNamespace(threshold=0.05, alpha=0.05), r, job, "parent")
    rng = np.random.default_rng(0)
    s.levels = {v: level(m, rng) for v, m in levels.items()}
    return s, said


def test_a_level_is_every_process_of_its_runs():
    lv = level(1e-3, np.random.default_rng(1))
    assert len(lv.processes) == 5 and all(abs(m / 1e-3 - 1) < 0.02 for m in lv.medians)


def test_a_slower_probe_is_judged_and_said():
    s, said = steps({"1.0": 1e-3, "1.2": 1.3e-3})
    v = s.judged(0, 2)
    assert v.verdict == bisection_unpaired.Verdict.SLOWER and s.changed(v) and 1.25 < v.ratio < 1.35
    assert said == [f"1.0 → 1.2: slower (×{v.ratio:.3f} [{v.ci_low:.3f}, {v.ci_high:.3f}], p {v.p_value:.2g})"]


def test_a_step_below_the_verdicts_reach_says_so():
    s, _ = steps({"1.0": 1e-3, "1.1": 1e-3})
    v = s.evidence(0, 1)
    assert v.verdict == bisection_unpaired.Verdict.SAME and not s.changed(v)
    assert s.note(0, 1, v).startswith("the step 1.0 → 1.1 alone is below the verdict's reach")
    assert s.unchanged(0, 1, v) == "the ends 1.0 and 1.1 don't differ (no change): nothing to bisect"

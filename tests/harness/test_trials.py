"""A cell's trials as the paired verdict reads them: the trials set aside under load, and the floor their rounds
set on the spread."""
import math

import pytest

from experiments.stats.paired import judge_pairs
from experiments.stats.verdicts import Verdict


def test_a_cell_judges_without_its_set_aside_trials_and_keeps_them():
    from experiments.harness.trials import Cell, Compared, Trial, Turn
    from experiments.common.protocol import Burst, Prepared

    def trial(index, ratio, busy):
        turns = [Turn(prepared=Prepared("ok"), bursts=[Burst([t])]) for t in (1e-3, ratio * 1e-3)]
        return Trial(index, turns, meter={"wall_s": 1.0, "busy_cpu_s": busy + 1.0, "own_cpu_s": 0.0,
                                          "workers_cpu_s": 1.0})

    c = Compared(Cell(8, "inference"), [trial(i, r, b) for i, (r, b) in enumerate(
        [(0.82, 0.0), (0.84, 0.0), (0.002, 0.97), (0.80, 0.0), (0.83, 0.1)])])
    assert [t.index for t in c.used(1, 0)] == [0, 1, 3, 4] and len(c.trials) == 5
    assert [(t.index, why.split(" is ")[0]) for t, why in c.set_aside(1, 0)] == [(2, "its ratio 0.002")]
    assert c.log_ratios(1, 0) == pytest.approx([math.log(r) for r in (0.82, 0.84, 0.80, 0.83)])
    (v,) = judge_pairs([c.log_ratios(1, 0)], 0.03, 0.05)
    (all_in,) = judge_pairs([[t.log_ratio(1, 0) for t in c.trials]], 0.03, 0.05)
    assert v.verdict == Verdict.FASTER and all_in.verdict == Verdict.INCONCLUSIVE and all_in.ci_low < 0.05


def test_a_cells_floor_is_the_median_of_what_its_trials_rounds_leave_uncertain():
    from experiments.common.protocol import Burst, Prepared
    from experiments.harness.trials import Cell, Compared, Trial, Turn

    def trial(index, spread):
        b = [Burst([1e-3 * math.exp(spread * (-1) ** r * (r % 3))]) for r in range(9)]
        turns = [Turn(prepared=Prepared("ok"), bursts=[Burst([1e-3])] * 9), Turn(prepared=Prepared("ok"), bursts=b)]
        return Trial(index, turns)

    c = Compared(Cell(8, "inference"), [trial(i, sd) for i, sd in enumerate((0.01, 0.02, 0.04))])
    ses = [t.log_ratio_se(1, 0) for t in c.trials]
    assert ses[0] < ses[1] < ses[2] and c.floor(1, 0) == pytest.approx(ses[1])
    assert Compared(Cell(8, "inference")).floor(1, 0) == 0.0

"""`python -m experiments.selfcheck.paired`, the burst-length self-check: what it reads of its two-sided trials
(`pairs.run_pair`'s), each trial stood in with known bursts, so that its tables and verdicts have a known truth."""
import argparse
import math
from types import SimpleNamespace

from experiments.common.protocol import Burst, Point, Prepared
from experiments.harness import pairs
from experiments.selfcheck import paired as probe


def trial(index: int, b_over_a: float, rounds: int = 4) -> pairs.Trial:
    """A two-sided trial whose every round reads B/A = `b_over_a` (A's calls 1 ms)."""
    turns = [pairs.Turn(prepared=Prepared("ok", device="cpu"), bursts=[Burst([t] * 5) for _ in range(rounds)])
             for t in (1e-3, 1e-3 * b_over_a)]
    return pairs.Trial(index, turns, order="AB" * rounds, wall_s=0.5)


def test_the_planted_check_judges_every_two_sided_trial(monkeypatch, capsys, tmp_path):
    """A/A trials read 1 and the planted ones 1.1 (one failed): the tables count the trials that measured, and the
    planted trials judged together read 1.1, slower; a failed trial is left out."""
    failed = pairs.Trial(9, [], failure="worker B was killed by SIGKILL", failed_side=1)
    made = {"aa": [trial(k, 1.0) for k in range(4)], "planted": [*(trial(k, 1.1) for k in range(4)), failed]}
    point = SimpleNamespace(model="matmul_chain", points=[Point(32, ("inference",))], variant="torch-eager fp32")
    monkeypatch.setattr(probe, "job", lambda overrides: point)
    monkeypatch.setattr(probe, "loaded", lambda what: None)
    monkeypatch.setattr(pairs.Side, "of", classmethod(lambda cls, job, label, cache=None: label))
    monkeypatch.setattr(probe, "interleaved", lambda sides, n, side_s, out: {b: made[out.name] for b in sides})
    a = argparse.Namespace(bursts_ms="20", pairs=4, side_s=0.08, out=tmp_path, threads=None, overrides=None,
                           planted=True, verdicts=0, group=2)
    assert probe.run(a) == 0
    out = capsys.readouterr().out
    assert "| 20 ms | 4 of 4 | 0.00% (0.00%) |" in out and "| 20 ms | 4 of 5 | 0.00% (0.00%) |" in out
    assert f"all 4 pairs: B/A {1.1:.4f} [1.1000, 1.1000], slower" in out
    assert "2-pair groups: planted found (slower) in 2 of 2; A/A slower or faster in 0 of 2" in out
    assert math.isclose(probe.estimators(made["planted"][0])[0], math.log(1.1))

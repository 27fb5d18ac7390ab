"""When a stopped job runs again (sweep.requeue), in-process: outside SLURM nothing is taken over and a SIGTERM ends
the job; inside, a SIGTERM is a requeue only where SLURM's restart count has grown past this run's."""
import signal

import pytest

from experiments.sweep import requeue


@pytest.fixture
def slurm(monkeypatch, tmp_path):
    """A SLURM job whose `scontrol show job` says `Restarts=<n>` (n: what the test writes to the returned file)."""
    restarts = tmp_path / "restarts"
    scontrol = tmp_path / "bin" / "scontrol"
    scontrol.parent.mkdir()
    scontrol.write_text(f"#!/bin/sh\necho \"JobId=$5 JobName=x Restarts=$(cat {restarts}) BatchFlag=1\"\n")
    scontrol.chmod(0o755)
    monkeypatch.setenv("PATH", f"{scontrol.parent}:/usr/bin:/bin")
    monkeypatch.setenv("SLURM_JOB_ID", "42")
    monkeypatch.setenv("SLURM_RESTART_COUNT", "1")
    requeue.requeued.cache_clear()
    yield restarts
    requeue.requeued.cache_clear()


def test_outside_slurm_nothing_runs_again(monkeypatch):
    for var in ("SUBMITIT_EXECUTOR", "SLURM_JOB_ID"):
        monkeypatch.delenv(var, raising=False)
    requeue.requeued.cache_clear()
    assert requeue.signals() == () and not requeue.requeued()
    assert not requeue.runs_again(signal.SIGTERM) and not requeue.runs_again(signal.SIGINT)


@pytest.mark.parametrize("restarts,again", [(2, True), (1, False)])
def test_a_sigterm_is_a_requeue_only_when_the_restart_count_grew(slurm, restarts, again):
    slurm.write_text(str(restarts))
    assert requeue.runs_again(signal.SIGTERM) is again
    assert not requeue.runs_again(signal.SIGINT)  # a Ctrl-C is never a requeue


def test_no_answer_from_slurm_is_a_cancel(slurm, monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")  # no scontrol: the job ends KILLED rather than waiting for a rerun
    assert not requeue.requeued()

"""SLURM faults in the middle of a point, on the real single-node cluster (tests/cluster/slurm.sh): a job requeued
while it measures, its node's slurmd killed and started again, and submitit's time-limit signal. A requeued job runs
again and measures only what its dir does not hold; every point ends once, FINISHED or FAILED with its reason; no
run stays RUNNING, none is logged twice, and the sweep's last line counts them.

Points come from the fake worker (tests/helpers/fake_worker.py: FAKE_DELAY_S seconds each), so a fault lands inside
a point and the counts are exact. The progress log gets one mark per measured point, so it says how many times the
points were measured in all: once each.
"""
import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.helpers import fake_interpreter, with_store
from tests.helpers.faults import launch, wait_for
from tests.sweep.test_faults import assert_once_each_and_closed

pytestmark = pytest.mark.slow
SLURM_DIR = Path(os.environ.get("NNBENCH_SLURM_DIR", "/tmp/nnbench-slurm"))
FAKE = ["framework=torch", "bench=quick", "ops=[inference]", "hydra/launcher=slurm"]
LENET, MLP = [2, 8, 32, 128], [2, 8, 32, 128, 512, 2048]  # their inference batch sizes


@pytest.fixture(scope="module")
def fake(tmp_path_factory) -> str:
    """The fake worker as `runtime.python`, for every job of the module (the nodes share this disk)."""
    return fake_interpreter(tmp_path_factory.mktemp("fake"))


def saved(cwd: Path, job: int) -> int:
    return len(list(cwd.glob(f"multirun/*/*/{job}/points/*/record.json")))


def running_task(cwd: Path, proc) -> str:
    """The array task of this sweep that SLURM runs now (one at a time: array_parallelism=1)."""
    arrays = ",".join({p.name.split("_")[0] for p in cwd.glob("multirun/*/*/.submitit/*")
                       if re.fullmatch(r"\d+(_\d+)?", p.name)})  # an array task, or a lone job
    for _ in range(30):  # squeue may miss a task that is starting, and a busy slurmctld may not answer at once
        assert proc.poll() is None, proc.communicate()[1][-3000:]  # the sweep ended before its fault
        r = subprocess.run(["squeue", "-h", "-t", "R", "-o", "%i", "-j", arrays], capture_output=True, text=True)
        if len(r.stdout.split()) == 1:
            return r.stdout.strip()
        time.sleep(1)
    raise AssertionError(f"no single running task of {arrays}: {r.stdout} {r.stderr}")


def finish(proc, cwd: Path) -> tuple[str, str, str]:
    """The sweep's exit, its last line, and the sweep dir."""
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err[-3000:]
    assert "Traceback" not in out + err
    (sweep,) = cwd.glob("multirun/*/*/nnbench-sweep.json")
    return out.strip().splitlines()[-1], err, str(sweep.parent)


def measured(sweep: str) -> int:
    return len((Path(sweep) / "nnbench-progress.log").read_text())


def job_log(sweep: str, job: int) -> str:
    """What every run of the Hydra job logged (submitit appends each run to one file)."""
    dirs = list(Path(sweep).glob(f".submitit/*_{job}")) or [d for d in Path(sweep).glob(".submitit/*")
                                                           if d.name.isdigit()]  # a sweep of one job: no array
    return "".join(p.read_text() for d in dirs for p in d.glob("*_log.out"))


def accounted(task: str) -> list[str]:
    """Each run of the array task as SLURM accounted it (-D: a requeued job's earlier runs too)."""
    out = subprocess.run(["sacct", "-n", "-X", "-D", "-P", "-o", "State", "-j", task], capture_output=True,
                         text=True).stdout
    return out.split()


@pytest.fixture(scope="module")
def requeued_and_slurmd_killed(slurm, fake, tmp_path_factory):
    """One sweep of two jobs (lenet's 4 points, then mlp_relu's 6; 3 s per point): job 0 is requeued while it
    measures its second point (`scontrol requeue`, what a preemption does); while job 1 measures its second, the
    node's slurmd is killed (SIGKILL) and started again 10 s later, before the job ends (a job that ended meanwhile
    would wait for slurmd to report it)."""
    cwd = with_store(tmp_path_factory.mktemp("requeue"))
    proc = launch(["-m", *FAKE, "model=lenet,mlp_relu", f"runtime.python={fake}"], cwd, FAKE_FAULT="none",
                  FAKE_DELAY_S="3", FAKE_MEDIAN_PER_BATCH="1")
    wait_for(lambda: saved(cwd, 0) >= 1 or proc.poll() is not None, "job 0's first point", 300)
    first = running_task(cwd, proc)
    subprocess.run(["scontrol", "requeue", first], check=True)
    wait_for(lambda: saved(cwd, 1) >= 1 or proc.poll() is not None, "job 1's first point", 300)
    second = running_task(cwd, proc)
    os.kill(int((SLURM_DIR / "slurmd.pid").read_text()), signal.SIGKILL)
    time.sleep(10)
    subprocess.run(["slurmd"], check=True)  # it reads /etc/slurm/slurm.conf, as slurm.sh started it
    return (*finish(proc, cwd), first, second)


def test_a_requeued_job_measures_only_what_it_had_not(requeued_and_slurmd_killed):
    last, _, sweep, first, _ = requeued_and_slurmd_killed
    assert last == "10 finished, 0 skipped, 0 failed"
    assert accounted(first) == ["REQUEUED", "COMPLETED"]  # it ran twice
    assert "runs again: 1 of its points were measured before, 3 left" in job_log(sweep, 0)
    assert measured(sweep) == 10  # the point in progress at the requeue was measured once, by the next run
    uri = f"sqlite:///{Path(sweep).parents[2]}/mlruns/mlflow.db"
    assert_once_each_and_closed(uri, LENET + MLP)
    assert json.loads((Path(sweep) / "nnbench-sweep.json").read_text())["ended"] == "finished"


def test_a_killed_slurmd_costs_nothing(requeued_and_slurmd_killed):
    _, _, sweep, _, second = requeued_and_slurmd_killed
    assert accounted(second) == ["COMPLETED"]  # the job went on while its node's daemon was away
    assert "runs again" not in job_log(sweep, 1)


def test_time_limit_requeues_then_fails_the_rest_with_the_reason(slurm, fake, tmp_path):
    """submitit's signal before a time limit (USR2, sent here by `scancel --signal`, as submitit's own tests do, so
    that it comes inside a point: SLURM sends it from a 30 s timer), twice, with one requeue allowed: the job stops
    its worker, submitit requeues it, the next run measures what is left until the second signal, and the points
    still left become FAILED runs that say why."""
    proc = launch(["-m", *FAKE, "model=lenet", f"runtime.python={fake}", "hydra.launcher.timeout_min=5",
                   "hydra.launcher.max_num_timeout=1"], with_store(tmp_path), FAKE_FAULT="none", FAKE_DELAY_S="3",
                  FAKE_MEDIAN_PER_BATCH="1")
    for n in (1, 3):
        wait_for(lambda: saved(tmp_path, 0) >= n or proc.poll() is not None, f"{n} points", 300)
        task = running_task(tmp_path, proc)
        subprocess.run(["scancel", "--signal=USR2", task], check=True)
    last, _, sweep = finish(proc, tmp_path)
    assert last == "3 finished, 0 skipped, 1 failed"
    assert accounted(task) == ["REQUEUED", "COMPLETED"]
    log = job_log(sweep, 0)
    assert "Requeued job" in log and "Job not requeued because: timed-out too many times" in log  # submitit's
    assert measured(sweep) == 3
    uri = f"sqlite:///{tmp_path}/mlruns/mlflow.db"
    assert_once_each_and_closed(uri, LENET)
    (failed,) = [p for p in tmp_path.glob("multirun/*/*/0/points/*/record.json")
                 if json.loads(p.read_text())["outcome"] == "failed"]
    reason = json.loads(failed.read_text())["tags"]["failure_reason"]
    assert reason.startswith("the SLURM job reached its time limit (hydra.launcher.timeout_min=5)")
    assert "hydra.launcher.max_num_timeout" in reason

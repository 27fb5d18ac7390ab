"""SLURM faults in the middle of a paired group's trials, on the real single-node cluster (tests/cluster/slurm.sh): a
group's leader (the job that measures every variant of its cells) requeued while it measures, its node's slurmd
killed and started again, and submitit's time-limit signal. A requeued leader runs again and measures its group from
the start (a signal saves nothing where SLURM runs the job again); every point ends once, FINISHED or FAILED with its
reason; no run stays RUNNING, none is logged twice, and the sweep's last line counts them.

Points come from the fake worker (tests/helpers/fake_worker.py: FAKE_DELAY_S seconds per prepared cell), so a fault
lands inside a group's trials and the counts are exact.
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
FAKE = ["framework=jax,torch", "bench=quick", "ops=[inference]", "hydra/launcher=slurm"]
LENET, MLP = [2, 8, 32, 128], [2, 8, 32, 128, 512, 2048]  # their inference batch sizes


@pytest.fixture(scope="module")
def fake(tmp_path_factory) -> str:
    """The fake worker as `runtime.python`, for every job of the module (the nodes share this disk)."""
    return fake_interpreter(tmp_path_factory.mktemp("fake"))


def trials(cwd: Path, job: int, since: float = 0.0) -> int:
    """The cells job `job` has measured in its first trial (written since `since`: a later run's)."""
    return len([p for p in cwd.glob(f"multirun/*/*/{job}/trials/*/trial-0.json") if p.stat().st_mtime > since])


def leaders(cwd: Path) -> list[int]:
    """The jobs that measure a group, in sweep order (the sweep's state holds its groups once it started)."""
    wait_for(lambda: list(cwd.glob("multirun/*/*/nnbench-sweep.json")), "the sweep's state", 120)
    (state,) = cwd.glob("multirun/*/*/nnbench-sweep.json")
    return [g[0] for g in json.loads(state.read_text())["groups"]]


def measured_by(sweep: str, leader: int) -> dict[str, int]:
    """Per point of the leader's group (`<job>/<slug>`): how many trials measured it."""
    out = {}
    for p in Path(sweep).glob(f"{leader}/job-*/points/*/samples.json"):
        out[f"{p.parents[2].name}/{p.parent.name}"] = len(json.loads(p.read_text())["inference"]["processes"])
    return out


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


def finish(proc, cwd: Path, code: int = 0) -> tuple[str, str, str]:
    """The sweep's exit (`code`: 1 where no point was measured), its last line, and the sweep dir."""
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == code, err[-3000:]
    assert "Traceback" not in out + err
    (sweep,) = cwd.glob("multirun/*/*/nnbench-sweep.json")
    return out.strip().splitlines()[-1], err, str(sweep.parent)


def job_log(sweep: str, job: int) -> str:
    """What every run of the Hydra job logged (submitit appends each run to one file)."""
    dirs = list(Path(sweep).glob(f".submitit/*_{job}")) or [d for d in Path(sweep).glob(".submitit/*")
                                                           if d.name.isdigit()]  # a sweep of one job: no array
    return "".join(p.read_text() for d in dirs for p in d.glob("*_log.out"))


def accounted(task: str) -> list[str]:
    """Each run of the array task as SLURM accounted it (-D: a requeued job's earlier runs too), once its last run's
    end is accounted: that may come a moment after the sweep that waited for the job has ended."""
    for _ in range(30):
        out = subprocess.run(["sacct", "-n", "-X", "-D", "-P", "-o", "State", "-j", task], capture_output=True,
                             text=True).stdout.split()
        if out and out[-1] not in ("RUNNING", "PENDING", "COMPLETING"):
            break
        time.sleep(1)
    return out


@pytest.fixture(scope="module")
def requeued_and_slurmd_killed(slurm, fake, tmp_path_factory):
    """One sweep of two groups, each measured by its first job (lenet's 4 cells, then mlp_relu's 6, each variant
    1.5 s per cell): lenet's leader is requeued while it measures its second cell (`scontrol requeue`, what a
    preemption does); while mlp_relu's leader measures its second, the node's slurmd is killed (SIGKILL) and started
    again 10 s later, before the job ends (a job that ended meanwhile would wait for slurmd to report it)."""
    cwd = with_store(tmp_path_factory.mktemp("requeue"))
    proc = launch(["-m", *FAKE, "model=lenet,mlp_relu", f"runtime.python={fake}"], cwd, FAKE_FAULT="none",
                  FAKE_DELAY_S="1.5", FAKE_MEDIAN_PER_BATCH="1")
    lenet, mlp = leaders(cwd)
    wait_for(lambda: trials(cwd, lenet) >= 1 or proc.poll() is not None, "lenet's first cell", 300)
    first = running_task(cwd, proc)
    subprocess.run(["scontrol", "requeue", first], check=True)
    wait_for(lambda: trials(cwd, mlp) >= 1 or proc.poll() is not None, "mlp_relu's first cell", 300)
    second = running_task(cwd, proc)
    os.kill(int((SLURM_DIR / "slurmd.pid").read_text()), signal.SIGKILL)
    time.sleep(10)
    subprocess.run(["slurmd"], check=True)  # it reads /etc/slurm/slurm.conf, as slurm.sh started it
    return (*finish(proc, cwd), first, second, lenet, mlp)


def test_a_requeued_leader_measures_its_group_again_and_logs_each_point_once(requeued_and_slurmd_killed):
    last, _, sweep, first, _, lenet, _ = requeued_and_slurmd_killed
    assert last == "20 finished, 0 skipped, 0 failed"
    assert accounted(first) == ["REQUEUED", "COMPLETED"]  # it ran twice
    assert "requeued by SLURM; its next run measures the points it has not finished" in job_log(sweep, lenet)
    # nothing of the first run was saved: the next run measured every point of the group, each in one trial
    m = measured_by(sweep, lenet)
    assert len(m) == 8 and set(m.values()) == {1} and {k.split("/")[1].split("-")[0] for k in m} == {"lenet"}
    uri = f"sqlite:///{Path(sweep).parents[2]}/mlruns/mlflow.db"
    assert_once_each_and_closed(uri, LENET * 2 + MLP * 2)
    assert json.loads((Path(sweep) / "nnbench-sweep.json").read_text())["ended"] == "finished"


def test_a_killed_slurmd_costs_nothing(requeued_and_slurmd_killed):
    _, _, sweep, _, second, _, mlp = requeued_and_slurmd_killed
    assert accounted(second) == ["COMPLETED"]  # the job went on while its node's daemon was away
    assert "requeued by SLURM" not in job_log(sweep, mlp)
    assert len(measured_by(sweep, mlp)) == 12 and set(measured_by(sweep, mlp).values()) == {1}


def test_time_limit_requeues_then_fails_the_group_with_the_reason(slurm, fake, tmp_path):
    """submitit's signal before a time limit (USR2, sent here by `scancel --signal`, as submitit's own tests do, so
    that it comes inside the trials: SLURM sends it from a 30 s timer), twice, with one requeue allowed: the leader
    stops its workers, submitit requeues it, the next run measures the group again until the second signal, and the
    group's points (each variant's, the follower's too) become FAILED runs that say why."""
    proc = launch(["-m", *FAKE, "model=lenet", f"runtime.python={fake}", "hydra.launcher.timeout_min=5",
                   "hydra.launcher.max_num_timeout=1"], with_store(tmp_path), FAKE_FAULT="none", FAKE_DELAY_S="1.5",
                  FAKE_MEDIAN_PER_BATCH="1")
    since = 0.0
    for _ in range(2):
        wait_for(lambda: trials(tmp_path, 0, since) >= 1 or proc.poll() is not None, "a cell measured", 300)
        task = running_task(tmp_path, proc)
        since = time.time()
        subprocess.run(["scancel", "--signal=USR2", task], check=True)
    last, err, sweep = finish(proc, tmp_path, code=1)
    assert last == "0 finished, 0 skipped, 8 failed" and "no point was measured" in err
    assert accounted(task) == ["REQUEUED", "COMPLETED"]
    log = job_log(sweep, 0)
    assert "Requeued job" in log and "Job not requeued because: timed-out too many times" in log  # submitit's
    uri = f"sqlite:///{tmp_path}/mlruns/mlflow.db"
    assert_once_each_and_closed(uri, LENET * 2)
    failed = list(tmp_path.glob("multirun/*/*/0/job-*/points/*/record.json"))
    assert len(failed) == 8 and not list(tmp_path.glob("multirun/*/*/1/**/record.json"))
    for p in failed:
        reason = json.loads(p.read_text())["tags"]["failure_reason"]
        assert reason.startswith("the SLURM job reached its time limit (hydra.launcher.timeout_min=5)")
        assert "hydra.launcher.max_num_timeout" in reason

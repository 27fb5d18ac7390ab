"""resume=true after a sweep was cut short: only what is missing is measured, nothing twice, nothing lost.

The cut is the one a cluster makes: SIGTERM to the sweep (SLURM's time limit or preemption), or `scancel` of a
job running on SLURM. The sweep measures with the real torch worker, so the environment fingerprint that resume
matches is the one the worker records.
"""
import json
import signal
import subprocess

import pytest

from tests.helpers import run, runs, with_store
from tests.helpers.faults import launch, wait_for

SWEEP = ["-m", "framework=torch", "model=mlp_relu", "ops=[inference]", "bench=quick", "bench.min_time_s=1"]  # 6 points, >= 6 s
SIZES = ["2", "8", "32", "128", "512", "2048"]

pytestmark = pytest.mark.slow


def saved(cwd) -> int:
    """Points saved on disk (they reach the store once their worker has ended)."""
    return len(list(cwd.glob("multirun/**/points/*/record.json")))


def check_resumed(cwd, before, *launcher: str):
    """Re-run with resume=true: the FINISHED points are skipped, the rest measured once; nothing RUNNING."""
    uri = f"sqlite:///{cwd}/mlruns/mlflow.db"
    finished = set(before[before["status"] == "FINISHED"]["params.batch_size"])
    r = run([*SWEEP, *launcher, "resume=true"], cwd)
    assert r.returncode == 0, r.stderr[-3000:]
    last = r.stdout.strip().splitlines()[-1]
    assert last == f"{6 - len(finished)} finished, 0 skipped, 0 failed, {len(finished)} already in the store (resume)"
    after = runs(uri)
    done = after[after["status"] == "FINISHED"]
    assert sorted(done["params.batch_size"], key=int) == SIZES  # every point once, none twice
    new = after[~after["run_id"].isin(before["run_id"])]
    assert set(new["params.batch_size"]).isdisjoint(finished)  # nothing new for what was there
    assert "RUNNING" not in set(after["status"]) | set(runs(uri, parents=True)["status"])
    return len(finished), len(new)


def test_sigterm_then_resume(tmp_path):
    proc = launch(SWEEP, with_store(tmp_path))
    wait_for(lambda: saved(tmp_path) >= 2, "two points measured")
    proc.send_signal(signal.SIGTERM)  # what SLURM sends at a time limit
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err[-2000:]
    assert err.strip().splitlines()[-1].startswith("nnbench: interrupted by SIGTERM")
    before = runs(f"sqlite:///{tmp_path}/mlruns/mlflow.db")
    assert set(before["status"]) <= {"FINISHED", "KILLED"} and len(before) < 6
    skipped, measured = check_resumed(tmp_path, before)
    assert skipped >= 2 and skipped + measured == 6


def test_scancel_on_slurm_then_resume(tmp_path, slurm):
    """A job cancelled on SLURM (SIGTERM to every process of the job): points kept, the sweep's parent KILLED, and
    resume=true through SLURM again measures only what is missing."""
    proc = launch([*SWEEP, "hydra/launcher=slurm"], with_store(tmp_path))
    wait_for(lambda: saved(tmp_path) >= 2, "two points measured by the SLURM job")
    job_ids = {json.loads(p.read_text())["tags"]["slurm_job_id"]
               for p in tmp_path.glob("multirun/**/points/*/record.json")}
    subprocess.run(["scancel", *job_ids], check=True)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 1, err[-3000:]  # the sweep ended short: a non-zero exit, with one line
    assert "interrupted" in err.strip().splitlines()[-1]
    uri = f"sqlite:///{tmp_path}/mlruns/mlflow.db"
    assert set(runs(uri, parents=True)["status"]) == {"KILLED"}
    before = runs(uri)
    assert "interrupted" in set(before["tags.outcome"])
    skipped, measured = check_resumed(tmp_path, before, "hydra/launcher=slurm")
    assert skipped >= 2 and skipped + measured == 6

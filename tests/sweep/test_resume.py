"""resume=true after a sweep was cut short: only what is missing is measured, nothing twice, nothing lost.

The cut is the one a cluster makes: SIGTERM to the sweep (SLURM's time limit or preemption), or `scancel` of the
jobs running on SLURM. It lands in a group's trials, after earlier groups were saved: that group's points are kept as
interrupted, and resume measures them again. These sweeps measure with the real torch worker, so the environment
fingerprint that resume matches is the one the worker records. A cell whose variants are only partly in the store
measures the missing ones paired against the others, measured again but not logged again (the stand-in worker).
"""
import json
import re
import signal
import subprocess

import pytest

from tests.helpers import run, runs, with_store
from tests.helpers.faults import launch, wait_for
from tests.sweep.test_faults import every_run

# 3 groups of one point each (batch sizes are not variants of a cell), each 2 cells of 1.2 s of bursts: the cut lands
# in the second group's second cell, once the first group is saved and the second's first cell measured. No parity
# process (what resume reads is which points are in the store, not their tags).
SWEEP = ["-m", "framework=torch", "model=mlp_relu", "batch_size=2,8,32", "ops=[inference,training]", "bench=quick",
         "bench.rounds=60", "parity=false"]
SIZES = ["2", "8", "32"]

pytestmark = pytest.mark.slow


def in_the_second_group(cwd) -> bool:
    """The first group's point is saved (it reaches the store once no worker runs) and the second group's first
    cell is measured: its second is being measured."""
    return bool(list(cwd.glob("multirun/*/*/0/**/points/*/record.json"))
                and list(cwd.glob("multirun/*/*/1/trials/*/trial-0.json")))


def cut_short(cwd):
    """The store after the cut: the first group's point FINISHED, the second's KILLED (interrupted), the third's
    not there."""
    before = runs(f"sqlite:///{cwd}/mlruns/mlflow.db")
    assert sorted(zip(before["params.batch_size"], before["status"], before["tags.outcome"])) == [
        ("2", "FINISHED", "ok"), ("8", "KILLED", "interrupted")]
    return before


def check_resumed(cwd, before, *launcher: str):
    """Re-run with resume=true: the FINISHED points are skipped, the rest measured once; nothing RUNNING."""
    uri = f"sqlite:///{cwd}/mlruns/mlflow.db"
    finished = set(before[before["status"] == "FINISHED"]["params.batch_size"])
    r = run([*SWEEP, *launcher, "resume=true"], cwd)
    assert r.returncode == 0, r.stderr[-3000:]
    last = r.stdout.strip().splitlines()[-1]
    n = len(SIZES)
    assert last == f"{n - len(finished)} finished, 0 skipped, 0 failed, {len(finished)} already in the store (resume)"
    after = runs(uri)
    done = after[after["status"] == "FINISHED"]
    assert sorted(done["params.batch_size"], key=int) == SIZES  # every point once, none twice
    new = after[~after["run_id"].isin(before["run_id"])]
    assert set(new["params.batch_size"]).isdisjoint(finished)  # nothing new for what was there
    assert "RUNNING" not in set(after["status"]) | set(runs(uri, parents=True)["status"])
    return len(finished), len(new)


def test_sigterm_then_resume(tmp_path):
    proc = launch(SWEEP, with_store(tmp_path))
    wait_for(lambda: in_the_second_group(tmp_path), "the second group's trials")
    proc.send_signal(signal.SIGTERM)  # what SLURM sends at a time limit
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err[-2000:]
    assert err.strip().splitlines()[-1].startswith("nnbench: interrupted by SIGTERM: 1 finished, 0 skipped, 0 failed, "
                                                   "1 interrupted, 1 not measured")
    # the second group forked its workers from the first group's server, which the sweep's process kept for it:
    # torch imported once per sweep, not once per group
    assert [p.parent.parent.name for p in tmp_path.glob("multirun/*/*/*/trials/server-*.log")] == ["0"]
    assert check_resumed(tmp_path, cut_short(tmp_path)) == (1, 2)


def test_resume_measures_a_cells_missing_variant_against_the_variant_it_kept(tmp_path, fake_python):
    """torch's points first; then jax,torch with resume=true: torch's are skipped, jax's measured paired against a
    torch worker (its twice-as-slow stand-in: jax's speedup 2) whose points are not logged again; then nothing is
    left to measure."""
    sweep = ["-m", "model=mlp_relu", "batch_size=2,8", "ops=[inference]", "bench=quick",
             f"runtime.python={fake_python}"]
    uri = f"sqlite:///{tmp_path}/mlruns/mlflow.db"
    first = run([*sweep, "framework=torch"], with_store(tmp_path), FAKE_FAULT="none")
    assert first.returncode == 0, first.stderr[-3000:]
    torch = set(runs(uri)["run_id"])
    r = run([*sweep, "framework=jax,torch", "resume=true"], tmp_path, FAKE_FAULT="none", FAKE_SPEEDUP="jax:2")
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.strip().splitlines()[-1] == "2 finished, 0 skipped, 0 failed, 2 already in the store (resume)"
    df = runs(uri)
    assert sorted(zip(df["params.framework"], df["params.batch_size"])) == [
        ("jax", "2"), ("jax", "8"), ("torch", "2"), ("torch", "8")]  # each point once
    assert set(df[df["params.framework"] == "torch"]["run_id"]) == torch and len(every_run(uri)) == 4 + 2
    jax = df[df["params.framework"] == "jax"]
    assert set(jax["tags.compared_with"]) == {"torch-eager fp32"}
    assert jax["metrics.inference_speedup"].between(1.98, 2.02).all()
    (sweep_dir,) = [p.parent for p in tmp_path.glob("multirun/*/*/nnbench-sweep.json")
                    if json.loads(p.read_text())["resumed"]]
    assert len(list(sweep_dir.glob("*/trials/bs*-inference/trial-0.json"))) == 2  # torch measured again, paired
    again = run([*sweep, "framework=jax,torch", "resume=true"], tmp_path, FAKE_FAULT="none")
    assert again.returncode == 0, again.stderr[-3000:]
    assert again.stdout.strip().splitlines()[-1] == "0 finished, 0 skipped, 0 failed, 4 already in the store (resume)"
    assert len(runs(uri)) == 4 and "trial 1" not in again.stdout


def test_scancel_on_slurm_then_resume(tmp_path, slurm):
    """The sweep's jobs cancelled on SLURM (SIGTERM to every process of the running one, the others never run):
    points kept, the sweep's parent KILLED, and resume=true through SLURM again measures only what is missing."""
    proc = launch([*SWEEP, "hydra/launcher=slurm"], with_store(tmp_path))
    wait_for(lambda: in_the_second_group(tmp_path), "the second group's trials, in its SLURM job", 300)
    arrays = {p.name.split("_")[0] for p in tmp_path.glob("multirun/*/*/.submitit/*")
              if re.fullmatch(r"\d+(_\d+)?", p.name)}  # the sweep's job array: its running task and the rest
    subprocess.run(["scancel", *arrays], check=True)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 1, err[-3000:]  # the sweep ended short: a non-zero exit, with one line
    assert "interrupted" in err.strip().splitlines()[-1]
    uri = f"sqlite:///{tmp_path}/mlruns/mlflow.db"
    assert set(runs(uri, parents=True)["status"]) == {"KILLED"}
    assert check_resumed(tmp_path, cut_short(tmp_path), "hydra/launcher=slurm") == (1, 2)

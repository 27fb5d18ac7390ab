"""The sweep dir: one sweep per dir, its state file (written whole, read back typed), the compile cache per host and
environment, resume's points left out, the points saved under it and the progress count."""
import socket
from dataclasses import replace

import pytest

from experiments.common.job import Job
from experiments.common.protocol import Point
from experiments.measure.machine import MachineCheck
from experiments.store.records import META
from experiments.store.sweepdir import STATE, Sweep, SweepState, SweepTaken
from tests.helpers import config

STATE_ = SweepState("sqlite:///x.db", "1", None, 1, 2, 0.0, measurements=4)


def test_a_sweep_dir_belongs_to_one_sweep(tmp_path):
    state = SweepState("sqlite:///x.db", "1", None, 1, 1, 0.0)
    Sweep(tmp_path / "s").start(state)
    assert Sweep(tmp_path / "s").running()
    with pytest.raises(SweepTaken, match="already holds another sweep"):
        Sweep(tmp_path / "s").start(state)
    (tmp_path / "old").mkdir()
    Sweep(tmp_path / "old").write(state)  # a sweep that ended long ago
    assert not Sweep(tmp_path / "old").running()
    with pytest.raises(SweepTaken):
        Sweep(tmp_path / "old").start(state)


def test_the_state_reads_back_as_it_was_written_and_a_rewrite_is_whole(tmp_path):
    machine = MachineCheck(0.05, 1.2, 0.1, 0.5, 2, {"smt": "0"})
    state = replace(STATE_, resumed={"0": [32]}, machine=machine)
    sweep = Sweep(tmp_path)
    sweep.write(state)
    assert sweep.read() == state and not (tmp_path / f"{STATE}.tmp").exists()
    sweep.end("interrupted")
    assert sweep.read().ended == "interrupted" and sweep.read().machine.facts == {"smt": "0"}


def test_the_compile_cache_is_per_host_and_environment_and_off_when_asked(tmp_path):
    job = Job(config("framework=jax"), None, (), fingerprint="0123456789abcdef9999")
    assert STATE_.compile_cache(tmp_path, job) == tmp_path / "compile-cache" / f"{socket.gethostname()}-0123456789abcdef"
    other = replace(job, fingerprint="fedcba9876543210")
    assert STATE_.compile_cache(tmp_path, other) != STATE_.compile_cache(tmp_path, job)
    assert STATE_.compile_cache(tmp_path, Job(config("runtime.compile_cache=false"), None, ())) is None


def test_a_job_leaves_out_the_points_resume_found(tmp_path):
    job = Job(config(), None, (Point(2, ("inference",)), Point(32, ("inference", "training"))))
    assert [p.batch_size for p in replace(STATE_, resumed={"0": [32]}).todo(job, 0).points] == [2]
    assert STATE_.todo(job, 0) == job


def test_only_saved_points_count_and_progress_is_counted_on_disk(tmp_path):
    sweep = Sweep(tmp_path)
    sweep.start(STATE_)
    for name, saved in (("a", True), ("b", False)):
        d = tmp_path / "0" / "points" / name
        d.mkdir(parents=True)
        (d / (META if saved else "config.yaml")).write_text("{}")
    assert sweep.point_dirs() == [tmp_path / "0" / "points" / "a"]  # record.json is written last
    assert Sweep.above(tmp_path / "0" / "points" / "a").directory == tmp_path
    assert sweep.tick(0) == "[0/4]"  # a variant skipped before anything was measured: no rate, no ETA
    assert sweep.tick().startswith("[1/4, ETA") and sweep.tick().startswith("[2/4, ETA")

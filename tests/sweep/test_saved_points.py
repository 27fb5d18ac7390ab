"""`nnbench upload`'s flow in-process: the points saved on disk found and grouped by their sweep, a sweep that still
runs left alone (exit 1), and a folder with no point one line naming the fix."""
import pytest

from experiments.common.errors import LOST, BadInput
from experiments.store import sweepdir
from experiments.store.records import META
from experiments.store.sweepdir import Sweep, SweepState
from experiments.sweep import saved_points


def saved(job: object, slug: str):
    """A point's dir as a sweep leaves it, its record written (last)."""
    point = sweepdir.point_dir(job, slug)
    point.mkdir(parents=True)
    (point / META).write_text("{}")
    return point


def test_points_are_grouped_by_the_sweep_above_them(tmp_path):
    sweep = tmp_path / "multirun" / "s1"
    sweep.mkdir(parents=True)
    Sweep(sweep).write(SweepState("sqlite:///x.db", "1", "parent", 2, 3, 0.0, ended="finished"))
    paired = [saved(sweepdir.job_dir(sweep / "0", n), "lenet-bs32") for n in (0, 1)]
    alone = saved(tmp_path / "single", "mlp-bs8")  # a single run's job dir: in no sweep
    (sweep / "0" / "points" / "half").mkdir(parents=True)  # no record yet: not a point
    assert saved_points.found(tmp_path) == {sweep: paired, None: [alone]}


def test_a_sweep_still_running_is_left_for_later(tmp_path, capsys):
    sweep = Sweep(tmp_path / "running")
    sweep.start(SweepState("sqlite:///x.db", "1", "parent", 1, 1, 0.0))  # this process holds its lock
    saved(tmp_path / "running" / "0", "lenet-bs32")
    assert saved_points.upload(tmp_path) == LOST
    assert "still running (its nnbench-sweep.json lock is held); upload it once it ends" in capsys.readouterr().out


def test_a_folder_without_points_names_the_fix(tmp_path):
    with pytest.raises(BadInput, match=r"no point saved under .* \(no points/\*/record.json\): give a sweep's"):
        saved_points.upload(tmp_path)

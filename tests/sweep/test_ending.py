"""How a sweep ends: its last line counts every outcome, and its parent run closes with the status a command's
parent run closes with for the same outcome (one rule, `store.parent.ending`)."""
import contextlib
import json
from dataclasses import replace
from types import SimpleNamespace

import pytest
from mlflow.tracking import MlflowClient

from experiments.common.config import DEFAULT_BASELINE
from experiments.common.errors import LOST
from experiments.store import tracking
from experiments.store.parent import parent_run
from experiments.store.sweepdir import Sweep
from experiments.sweep import ending, opening
from tests.helpers import with_store


def test_the_last_line_counts_every_outcome():
    o = ending.Outcome(ending.Counter(ok=5, skipped=1, failed=1, interrupted=1), planned=10)
    assert o.line() == "5 finished, 1 skipped, 1 failed, 1 interrupted, 2 lost"
    assert o.line(missing_as="not measured").endswith("2 not measured")
    assert ending.Outcome(ending.Counter(ok=2), planned=2).line() == "2 finished, 0 skipped, 0 failed"


def test_a_sweep_stopped_before_it_opened_has_no_parent_to_close():
    assert ending.close_stopped(None, interrupted=True) == " before anything was measured"


@pytest.fixture
def opened(uri, tmp_path, monkeypatch):
    """A sweep opened in tmp_path/sweep, without the machine check: its state."""
    monkeypatch.setattr(opening, "check", lambda seconds: None)
    monkeypatch.setattr(opening, "ACTIVE", None)
    return opening.open_sweep(tmp_path / "sweep", [], uri, "nnbench", opening.ParentRun("sweep · ending"))


def test_the_parent_counts_each_outcome_apart(uri, opened):
    """The parent's points_* metrics: a skipped or interrupted point is not counted finished."""
    o = ending.Outcome(ending.Counter(ok=3, skipped=2, failed=1, interrupted=4), planned=10)
    ending.close_parent(opened, "FINISHED", o)
    metrics = MlflowClient(uri).get_run(opened.parent_run_id).data.metrics
    assert {k: v for k, v in metrics.items() if k.startswith("points_")} == {
        "points_finished": 3, "points_skipped": 2, "points_failed": 1, "points_interrupted": 4}


def test_the_sweep_counts_its_points_on_disk_by_their_recorded_outcome(opened, tmp_path):
    """`outcome` reads each saved point's record: a skipped point counts skipped, a planned point without a record
    counts missing, and a point whose run the store lacks is not logged."""
    for n, outcome in enumerate(("ok", "ok", "skipped", "failed", "interrupted")):
        point = tmp_path / "sweep" / "0" / "points" / str(n)
        point.mkdir(parents=True)
        (point / ending.META).write_text(json.dumps({"outcome": outcome}))
    o = ending.outcome(Sweep(tmp_path / "sweep"), replace(opened, points=7))
    assert o.line() == "2 finished, 1 skipped, 1 failed, 1 interrupted, 5 not logged, 2 lost"
    assert len(o.not_logged) == 5 and not o.complete  # no point names a run the store holds


def command_parent(uri: str, outcome: str) -> str:
    """A command's parent run (`versions`, `bisect`) whose block ends with `outcome`; the status it closed with."""
    errors = {"interrupted": KeyboardInterrupt(), "stopped": ValueError("a fault"), "lost": ValueError("a fault")}
    store = tracking.Store(uri)
    with contextlib.suppress(KeyboardInterrupt, ValueError):
        with parent_run(store, store.open("nnbench"), outcome, {}, kind="versions") as run:
            if outcome in errors:
                raise errors[outcome]
    return MlflowClient(uri).get_run(run.run_id).info.status


def sweep_parent(uri: str, directory, outcome: str) -> tuple[str, int | None]:
    """A sweep's parent run, opened as a sweep opens it, ended with `outcome` (every point on record, a signal, an
    abort, a planned point without a record); the status it closed with, and the sweep's exit code where it ran to
    its end."""
    state = opening.open_sweep(directory, [], uri, "nnbench", opening.ParentRun(f"sweep · {outcome}"))
    sweep = Sweep(directory)
    if outcome == "lost":
        sweep.write(replace(state, points=1))
    code = None
    if outcome in ("whole", "lost"):
        code = ending.finish(sweep, SimpleNamespace(baseline=DEFAULT_BASELINE, fail_on_regression=False))
    else:
        ending.close_stopped(sweep, interrupted=outcome == "interrupted")
    return MlflowClient(uri).get_run(state.parent_run_id).info.status, code


@pytest.fixture(scope="module")
def uri(tmp_path_factory):
    return f"sqlite:///{with_store(tmp_path_factory.mktemp('store'), 'mlflow.db')}/mlflow.db"


@pytest.mark.parametrize("outcome,status", [("whole", "FINISHED"), ("interrupted", "KILLED"), ("stopped", "FAILED"),
                                            ("lost", "FAILED")])
def test_a_sweeps_parent_and_a_commands_end_alike(uri, tmp_path, monkeypatch, outcome, status):
    monkeypatch.setattr(opening, "check", lambda seconds: None)  # no machine check: nothing is measured
    monkeypatch.setattr(opening, "ACTIVE", None)
    closed, code = sweep_parent(uri, tmp_path / "sweep", outcome)
    assert closed == command_parent(uri, outcome) == status
    assert code == {"whole": 0, "lost": LOST}.get(outcome)  # a point lost is the sweep's failure, not only its run's


def test_a_sweep_that_measured_no_point_exits_1_and_says_so(opened, tmp_path, monkeypatch, capsys):
    """Every point skipped or failed, each kept and logged: the sweep is complete, and still it measured nothing."""
    sweep = Sweep(tmp_path / "sweep")
    monkeypatch.setattr(ending, "close_parent", lambda *a, **k: (2, []))
    for counts, code, single in (({"skipped": 1, "failed": 1}, LOST, False), ({"ok": 1, "failed": 1}, 0, False),
                                 ({"failed": 2}, LOST, True)):  # a single run has no parent run
        sweep.write(replace(opened, parent_run_id=None if single else opened.parent_run_id))
        monkeypatch.setattr(ending, "outcome", lambda s, state: ending.Outcome(ending.Counter(**counts), planned=2))
        assert ending.finish(sweep, SimpleNamespace(baseline=DEFAULT_BASELINE, fail_on_regression=False)) == code
        out, err = capsys.readouterr()
        assert out.strip().splitlines()[-1] == ending.Outcome(ending.Counter(**counts)).line()
        assert ("nnbench: error: no point was measured" in err) == (code == LOST)

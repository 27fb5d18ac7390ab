"""A command's parent run, on a real sqlite store: never left RUNNING. FINISHED on a normal exit (or the status the
block chose), closed once by its answer, KILLED on an interrupt, FAILED on any other exception, which goes on up;
a store that fails while closing it is not said over the command's own error."""
import pytest
from mlflow.tracking import MlflowClient

from experiments.common.interrupts import Interrupted
from experiments.store import tracking
from experiments.store.parent import parent_run
from tests.helpers import with_store


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    uri = f"sqlite:///{with_store(tmp_path_factory.mktemp('store'), 'mlflow.db')}/mlflow.db"
    return uri, tracking.Store(uri).open("nnbench")


def status(uri: str, run_id: str) -> str:
    return MlflowClient(uri).get_run(run_id).info.status


def test_a_normal_exit_finishes_it_with_its_params_and_kind(store):
    uri, exp = store
    with parent_run(tracking.Store(uri), exp, "versions a · b", {"specs": "a"}, kind="versions") as run:
        assert status(uri, run.run_id) == "RUNNING"
    r = MlflowClient(uri).get_run(run.run_id)
    assert r.info.status == "FINISHED" and r.data.params == {"specs": "a"} and r.data.tags["nnbench.versions"] == "true"


def test_the_block_chooses_its_status_or_closes_it_with_its_answer(store, tmp_path):
    uri, exp = store
    with parent_run(tracking.Store(uri), exp, "stopped", {}, kind="versions") as run:
        run.status = "KILLED"  # a sweep stopped by a signal, which said so itself
    assert status(uri, run.run_id) == "KILLED"
    with parent_run(tracking.Store(uri), exp, "answered", {}, kind="bisect") as run:
        run.status = "FAILED"
        run.finish(tmp_path, note="the answer", tags={"verdict": "slower"})
        assert run.closed and status(uri, run.run_id) == "FAILED"
    r = MlflowClient(uri).get_run(run.run_id)
    assert r.info.status == "FAILED" and r.data.tags["verdict"] == "slower"


@pytest.mark.parametrize("error,closed", [(KeyboardInterrupt(), "KILLED"), (Interrupted(15), "KILLED"),
                                          (ValueError("a fault"), "FAILED")])
def test_an_exception_closes_it_and_goes_on_up(store, error, closed):
    uri, exp = store
    with pytest.raises(type(error)):
        with parent_run(tracking.Store(uri), exp, "cut", {}, kind="bisect") as run:
            raise error
    assert status(uri, run.run_id) == closed


def test_a_store_that_fails_while_closing_is_not_said_over_the_error(store, monkeypatch):
    uri, exp = store
    with pytest.raises(ValueError, match="the command's own"):
        with parent_run(tracking.Store(uri), exp, "store gone", {}, kind="bisect") as run:
            monkeypatch.setattr(MlflowClient, "set_terminated", lambda *args, **kwargs: 1 / 0)
            raise ValueError("the command's own")
    monkeypatch.undo()
    assert status(uri, run.run_id) == "RUNNING"  # `nnbench upload` closes it

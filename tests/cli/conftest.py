"""Fixtures the command tests share."""
import pytest


@pytest.fixture(scope="session")
def paired_store(tmp_path_factory):
    """One real sqlite store for the tests that log paired comparisons (creating one takes seconds); each test reads
    the runs it started."""
    from experiments.store import tracking

    uri = f"sqlite:///{tmp_path_factory.mktemp('store')}/mlflow.db"
    tracking.open_store(uri, "nnbench")
    return uri

"""Which store a run logs to, and its validation in seconds without MLflow: a sqlite file that can be written, a server
that answers, a scheme MLflow 3 takes; each refusal one line naming the fix."""
import sqlite3

import pytest

from experiments.common.errors import BadInput
from experiments.store import uris
from tests.helpers import free_port


def test_the_config_key_wins_then_the_environment_then_the_local_store(monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    assert uris.store_uri(None) == uris.DEFAULT_URI == "sqlite:///mlruns/mlflow.db"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:5001")
    assert uris.store_uri(None) == "http://127.0.0.1:5001"
    assert uris.store_uri("sqlite:///other.db") == "sqlite:///other.db"
    assert uris.sqlite_path("sqlite:////abs/x.db").as_posix() == "/abs/x.db" and uris.sqlite_path("http://h") is None


def test_a_writable_sqlite_store_passes_and_nothing_is_created(tmp_path):
    uri = f"sqlite:///{tmp_path}/new/mlflow.db"
    assert uris.validate(uri, "nnbench") == uri
    assert not (tmp_path / "new").exists()  # only a temporary file was made, in the nearest existing dir
    sqlite3.connect(tmp_path / "ok.db").close()
    assert uris.validate(f"sqlite:///{tmp_path}/ok.db", "nnbench")


@pytest.mark.parametrize("uri,message", [
    ("sqlite:///:memory:", "keeps nothing after the run"),
    ("sqlite:///{tmp}", "is a directory: give a database file in it"),
    ("sqlite:///{tmp}/junk.db", "file is not a database"),
    ("./mlruns", "unsupported store './mlruns'"),
    ("ftp://host/store", r"use mlflow.tracking_uri=sqlite:///PATH\.db, http\(s\)://HOST:PORT or a database URI"),
])
def test_a_store_that_cannot_be_written_is_one_line(tmp_path, uri, message):
    (tmp_path / "junk.db").write_text("not a database at all, just text " * 10)
    with pytest.raises(BadInput, match=message):
        uris.validate(uri.format(tmp=tmp_path), "nnbench")


def test_an_unreachable_server_and_an_empty_experiment_name_are_refused():
    with pytest.raises(BadInput, match=r"cannot open the MLflow store at http://127\.0\.0\.1:\d+ .*start the tracking"):
        uris.validate(f"http://127.0.0.1:{free_port()}", "nnbench")
    with pytest.raises(BadInput, match="mlflow.experiment_name is empty"):
        uris.validate("sqlite:///x.db", " ")

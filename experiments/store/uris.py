"""Which MLflow store a run logs to, and whether it can be written, found in seconds without importing MLflow.
Parent side.

MLflow itself retries a sqlite store it can't open for minutes (`sqlite:////proc/nope.db` took 104 s and 37
warnings), so a store is validated here, before anything runs.
"""
from __future__ import annotations

import base64
import configparser
import os
import sqlite3
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from experiments.common.errors import BadInput

DEFAULT_URI = "sqlite:///mlruns/mlflow.db"
UI_PORT = 5000  # where `nnbench ui` serves a local store, and the port the links a sweep prints name
DATABASES = ("postgresql", "mysql", "mssql", "databricks")  # left to MLflow (its retries are bounded in tracking)
TIMEOUT_S = 5


def store_uri(configured: str | None) -> str:
    """The config key wins, then $MLFLOW_TRACKING_URI, then the local sqlite store under ./mlruns."""
    return configured or os.environ.get("MLFLOW_TRACKING_URI") or DEFAULT_URI


def sqlite_path(uri: str) -> Path | None:
    """The database file of a sqlite URI (relative to the working directory, as MLflow reads it), else None."""
    return Path(uri.removeprefix("sqlite:///")) if uri.startswith("sqlite:///") else None


def validate(tracking_uri: str | None, experiment_name: str) -> str:
    """The store's URI (as configured, else the default), once it is known to take writes; raises BadInput naming
    the fix."""
    uri = store_uri(tracking_uri)
    if not str(experiment_name).strip():
        raise BadInput("mlflow.experiment_name is empty: use e.g. mlflow.experiment_name=nnbench")
    scheme = uri.split("://", 1)[0].split("+")[0] if "://" in uri else ""
    if scheme == "sqlite":
        validate_sqlite(uri)
    elif scheme in ("http", "https"):
        if urllib.parse.urlsplit(uri).password is not None:
            raise BadInput("the tracking URI holds a password, which every run would record: put the user and password "
                           "in MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD, or in ~/.mlflow/credentials")
        validate_server(uri)
    elif scheme not in DATABASES and uri != "databricks":
        raise BadInput(f"unsupported store {uri!r}: use sqlite:///PATH.db, http(s)://HOST:PORT or a database URI "
                       "(postgresql://..., mysql://...); MLflow 3.13+ has no ./mlruns file store")
    return uri


def validate_sqlite(uri: str) -> None:
    path = sqlite_path(uri)
    if path is None or str(path) in ("", ":memory:"):
        raise BadInput(f"{uri} keeps nothing after the run: give a file, e.g. sqlite:///mlruns/mlflow.db")
    if path.is_dir():
        raise BadInput(f"{uri} is a directory: give a database file in it, e.g. sqlite:///{path / 'mlflow.db'}")
    where = next(p for p in (path.parent.absolute(), *path.parent.absolute().parents) if p.exists())
    try:  # the directory takes new files (the database, its journal and its creation lock): one made and gone
        tempfile.TemporaryFile(dir=where).close()
    except OSError as e:
        raise BadInput(f"cannot write the store {uri}: {where} is not a writable directory ({e.strerror or e}); "
                       "point mlflow.tracking_uri at a writable place") from None
    if path.exists():
        try:
            con = sqlite3.connect(f"file:{path.absolute()}?mode=rw", uri=True, timeout=TIMEOUT_S)
            try:
                con.execute("PRAGMA schema_version").fetchone()  # reads the header: "file is not a database"
                con.execute("BEGIN IMMEDIATE")  # takes the write lock: "attempt to write a readonly database"
                con.rollback()
            finally:
                con.close()
        except sqlite3.Error as e:
            raise BadInput(f"cannot write the store {uri} ({e}): fix or move {path}, or point mlflow.tracking_uri "
                           "elsewhere") from None


def validate_server(uri: str) -> None:
    """The server answers, and takes this user where it asks for one (MLflow's basic-auth app: HTTP 401 or 403)."""
    try:
        urllib.request.urlopen(f"{uri.rstrip('/')}/health", timeout=TIMEOUT_S).close()
    except Exception as e:
        reason = getattr(e, "reason", None) or e
        raise BadInput(f"cannot open the MLflow store at {uri} ({reason}): start the tracking server, or point "
                       "mlflow.tracking_uri / MLFLOW_TRACKING_URI at a reachable store") from None
    user, password = credentials()
    ask = urllib.request.Request(f"{uri.rstrip('/')}/api/2.0/mlflow/experiments/search?max_results=1")
    if user is not None and password is not None:
        ask.add_header("Authorization", "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode())
    try:
        urllib.request.urlopen(ask, timeout=TIMEOUT_S).close()
    except urllib.error.HTTPError as e:
        who = f"user {user!r} and its password" if user and password else "a sweep without credentials"
        if e.code == 401:
            raise BadInput(f"the MLflow server at {uri} refuses {who} (HTTP 401): set MLFLOW_TRACKING_USERNAME and "
                           "MLFLOW_TRACKING_PASSWORD, or ~/.mlflow/credentials, to a user of that server") from None
        if e.code == 403:
            raise BadInput(f"the MLflow server at {uri} does not let {who} read its experiments (HTTP 403): ask its "
                           "admin for permission") from None
    except OSError:  # an answer that is no HTTP error: MLflow meets it again, and says so, when the sweep opens it
        pass


def credentials() -> tuple[str | None, str | None]:
    """A tracking server's user and password as MLflow reads them (mlflow.utils.credentials, read here without
    importing MLflow): each from MLFLOW_TRACKING_USERNAME / MLFLOW_TRACKING_PASSWORD, else from the [mlflow]
    section of ~/.mlflow/credentials."""
    saved = configparser.ConfigParser()
    saved.read(Path("~/.mlflow/credentials").expanduser())
    section = saved["mlflow"] if saved.has_section("mlflow") else {}
    return (os.environ.get("MLFLOW_TRACKING_USERNAME") or section.get("mlflow_tracking_username"),
            os.environ.get("MLFLOW_TRACKING_PASSWORD") or section.get("mlflow_tracking_password"))

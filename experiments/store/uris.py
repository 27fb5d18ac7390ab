"""Which MLflow store a run logs to, and whether it can be written, found in seconds without importing MLflow.
Parent side.

MLflow itself retries a sqlite store it can't open for minutes (`sqlite:////proc/nope.db` took 104 s and 37
warnings), so a store is validated here, before anything runs.
"""
from __future__ import annotations

import base64
import configparser
import os
import re
import sqlite3
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from experiments.common.errors import BadInput, first_line

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


def scheme(uri: str) -> str:
    return uri.split("://", 1)[0].split("+")[0] if "://" in uri else ""


def validate(tracking_uri: str | None, experiment_name: str, option: str = "mlflow.tracking_uri") -> str:
    """The store's URI (as configured, else the default), once it is known to take writes; raises BadInput naming
    the fix (`option`: what sets the URI where the user typed it, the sweep's key or a command's --uri)."""
    uri = store_uri(tracking_uri)
    if not str(experiment_name).strip():
        raise BadInput("mlflow.experiment_name is empty: use e.g. mlflow.experiment_name=nnbench")
    if scheme(uri) == "sqlite":
        validate_sqlite(uri, option)
    else:
        validate_other(uri, option)
    return uri


def readable(configured: str | None, option: str = "--uri") -> str:
    """The store a reading command opens, found to be there in seconds (nothing is created, MLflow's minutes of
    retries are never met); raises BadInput naming the fix."""
    uri = store_uri(configured)
    if scheme(uri) != "sqlite":
        validate_other(uri, option)
        return uri
    path = file_of(uri, option)
    if not path.exists():
        sweep = "nnbench run -m framework=jax,torch model=lenet"
        said = (f"fix {option}, or run a sweep here first ({sweep} mlflow.tracking_uri={uri})" if configured else
                f"fix MLFLOW_TRACKING_URI, or pass {option}" if os.environ.get("MLFLOW_TRACKING_URI") else
                f"run a sweep in {Path.cwd()} first ({sweep}), or pass {option}")
        raise BadInput(f"no store at {uri} (no file {path.absolute()}): {said}")
    try:
        con = sqlite3.connect(f"file:{path.absolute()}?mode=ro", uri=True, timeout=TIMEOUT_S)
        try:
            con.execute("PRAGMA schema_version").fetchone()  # reads the header: "file is not a database"
        finally:
            con.close()
    except sqlite3.Error as e:
        raise BadInput(f"cannot read the store {uri} ({e}): fix or move {path}, or point {option} at "
                       "another store") from None
    return uri


def validate_other(uri: str, option: str) -> None:
    """A server answers (and takes this user), a database URI is left to MLflow, anything else is refused."""
    if scheme(uri) in ("http", "https"):
        if urllib.parse.urlsplit(uri).password is not None:
            raise BadInput("the tracking URI holds a password, which every run would record: put the user and password "
                           "in MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD, or in ~/.mlflow/credentials")
        validate_server(uri, option)
    elif scheme(uri) not in DATABASES and uri != "databricks":
        folder, use = Path(uri.removeprefix("file://")), f"{option}=" if "." in option else f"{option} "
        fix = (f"use {use}sqlite:///{folder / 'mlflow.db'}" if (folder / "mlflow.db").exists() else
               f"use {use}sqlite:///PATH.db, http(s)://HOST:PORT or a database URI (postgresql://..., mysql://...)")
        raise BadInput(f"unsupported store {uri!r} (MLflow 3.13+ has no ./mlruns file store): {fix}")


def file_of(uri: str, option: str) -> Path:
    """A sqlite URI's database file, refused where it can't hold a store."""
    path = sqlite_path(uri)
    if path is None or str(path) in ("", ":memory:"):
        raise BadInput(f"{uri} keeps nothing after the run: give a file, e.g. sqlite:///mlruns/mlflow.db")
    if path.is_dir():
        raise BadInput(f"{uri} is a directory: give a database file in it, e.g. sqlite:///{path / 'mlflow.db'}")
    return path


def validate_sqlite(uri: str, option: str = "mlflow.tracking_uri") -> None:
    path = file_of(uri, option)
    where = next(p for p in (path.parent.absolute(), *path.parent.absolute().parents) if p.exists())
    try:  # the directory takes new files (the database, its journal and its creation lock): one made and gone
        tempfile.TemporaryFile(dir=where).close()
    except OSError as e:
        raise BadInput(f"cannot write the store {uri}: {where} is not a writable directory ({e.strerror or e}); "
                       f"point {option} at a writable place") from None
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
            raise BadInput(f"cannot write the store {uri} ({e}): fix or move {path}, or point {option} "
                           "elsewhere") from None


def validate_server(uri: str, option: str = "mlflow.tracking_uri") -> None:
    """The server answers within TIMEOUT_S, and takes this user where it asks for one (MLflow's basic-auth app:
    HTTP 401 or 403)."""
    try:
        urllib.request.urlopen(f"{uri.rstrip('/')}/health", timeout=TIMEOUT_S).close()
    except Exception as e:
        reason = getattr(e, "reason", None) or e
        raise BadInput(f"cannot open the MLflow store at {uri} ({reason}): {server_fix(option)}") from None
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


def failure(uri: str, e: BaseException, option: str = "mlflow.tracking_uri") -> str:
    """A store's error as one line naming the fix, without MLflow's own text (its URLs, retry counts and object
    reprs, cut by `first_line` mid-word): the reason in a few words."""
    text = str(e)
    if m := re.search(r"\[Errno -?\d+\] ([^'\")(]+)", text):  # a socket's own words: "Connection refused"
        reason = m.group(1).strip().rstrip(".:")
    elif re.search(r"timed? ?out|Read timeout", text, re.I):
        reason = f"no answer within {os.environ.get('MLFLOW_HTTP_REQUEST_TIMEOUT', TIMEOUT_S)} s"
    elif m := re.search(r"error code (\d+)", text):
        reason = f"HTTP {m.group(1)}"
    else:
        reason = first_line(e)[:160]
    fix = server_fix(option) if scheme(uri) in ("http", "https") else (
        f"fix it, or point {option} / MLFLOW_TRACKING_URI at another store")
    return f"the MLflow store at {uri} failed ({reason}): {fix}"


def server_fix(option: str = "mlflow.tracking_uri") -> str:
    return f"start the tracking server, or point {option} / MLFLOW_TRACKING_URI at a reachable store"


def credentials() -> tuple[str | None, str | None]:
    """A tracking server's user and password as MLflow reads them (mlflow.utils.credentials, read here without
    importing MLflow): each from MLFLOW_TRACKING_USERNAME / MLFLOW_TRACKING_PASSWORD, else from the [mlflow]
    section of ~/.mlflow/credentials."""
    saved = configparser.ConfigParser()
    saved.read(Path("~/.mlflow/credentials").expanduser())
    section = saved["mlflow"] if saved.has_section("mlflow") else {}
    return (os.environ.get("MLFLOW_TRACKING_USERNAME") or section.get("mlflow_tracking_username"),
            os.environ.get("MLFLOW_TRACKING_PASSWORD") or section.get("mlflow_tracking_password"))

"""The only module that talks to MLflow: store set-up and one run per record, never two, never one left RUNNING.

A point's run is created first (with the point's directory as a tag) and its id goes to the point's
`mlflow_run_id` marker before the run is filled, so a run caught half-logged by a store failure is found and
completed later (`upload`), not logged a second time.
"""
from __future__ import annotations

import contextlib
import fcntl
import os
import time
from pathlib import Path
from typing import Callable

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
# A tracking server that goes away must cost seconds per run, not minutes of retries: results are on disk.
os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "2")
os.environ.setdefault("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "1")  # an int: sleeps 1 s, then 2 s
os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "30")
os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")  # "🏃 View run" per run on a server

import logging  # noqa: E402

import mlflow  # noqa: E402
import mlflow.store.db.utils  # noqa: E402
from mlflow.entities import Metric, Param, Run, RunTag  # noqa: E402
from mlflow.tracking import MlflowClient  # noqa: E402

from experiments.common.errors import first_line  # noqa: E402
from experiments.store.records import Record  # noqa: E402
from experiments.store.sweepdir import MARKER  # noqa: E402
from experiments.store.uris import DEFAULT_URI, sqlite_path  # noqa: E402

# MLflow retries a database it can't open 10 times with growing sleeps (104 s for sqlite:////proc/nope.db);
# three tries still ride out a database that is starting.
mlflow.store.db.utils.MAX_RETRY_COUNT = 3
# On stderr, "Creating initial MLflow database tables..." at every new store, and a full traceback for each
# database error that MLflow then raises anyway (a full disk printed 449 lines): the caller reports it in one line.
logging.getLogger("alembic").setLevel(logging.WARNING)
logging.getLogger("mlflow.store.db.utils").setLevel(logging.CRITICAL)
POINT_DIR, INCOMPLETE = "nnbench.point_dir", "nnbench.incomplete"  # tags: where a run's point is, why it's unfinished
TERMINAL = ("FINISHED", "FAILED", "KILLED")


class StoreUnavailable(Exception):
    """The store can't be opened; the message says where and what to do."""


@contextlib.contextmanager
def creation_lock(uri: str):
    """One process at a time creates or migrates a sqlite store: parallel creation races in the schema migration
    ("duplicate column name: step", "Online migration expected") and once left a database broken."""
    path = sqlite_path(uri)
    if path is None:
        yield
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield


def open_store(uri: str, experiment_name: str) -> str:
    """prepare_store, with a failure turned into one line that names the fix."""
    try:
        with creation_lock(uri):
            return prepare_store(uri, experiment_name)
    except Exception as e:
        first = first_line(e)
        fix = ("start the tracking server, or point" if uri.startswith("http") else "fix it, or point")
        raise StoreUnavailable(f"cannot open the MLflow store at {uri} ({first}): {fix} mlflow.tracking_uri / "
                               "MLFLOW_TRACKING_URI at a reachable store") from None


def prepare_store(uri: str, experiment_name: str) -> str:
    """Create (or migrate) the store and the experiment once, before any job logs; a server is asked again when
    another sweep creates the same experiment at the same moment."""
    artifacts = None
    if uri == DEFAULT_URI:
        Path("mlruns/artifacts").mkdir(parents=True, exist_ok=True)
        artifacts = Path("mlruns/artifacts").resolve().as_uri()
    client = MlflowClient(uri)
    for attempt in range(3):
        exp = client.get_experiment_by_name(experiment_name)
        if exp is not None and exp.lifecycle_stage == "deleted":
            raise StoreUnavailable(f"experiment {experiment_name!r} is deleted: restore it, or choose another "
                                   "mlflow.experiment_name")
        if exp is not None:
            return exp.experiment_id
        try:
            return client.create_experiment(experiment_name, artifact_location=artifacts)
        except mlflow.exceptions.MlflowException:  # created meanwhile by another process: read it again
            if attempt == 2:
                raise
            time.sleep(0.5 * (attempt + 1))
    raise AssertionError("unreachable")


def log_record(uri: str, experiment_id: str, rec: Record, artifacts: Path, parent_run_id: str | None = None,
               on_created: Callable[[str], None] = lambda run_id: None) -> str:
    """One MLflow run per point; `on_created` gets its id (to write the marker) before the run is filled."""
    client = MlflowClient(uri)
    tags = {"outcome": rec.outcome, POINT_DIR: str(artifacts.resolve())}
    if parent_run_id:
        tags["mlflow.parentRunId"] = parent_run_id
    run_id = client.create_run(experiment_id, run_name=rec.run_name, tags=tags).info.run_id
    try:
        on_created(run_id)
    except Exception:  # no marker names it: close and hide it, or upload would log the point a second time
        with contextlib.suppress(Exception):
            discard(uri, run_id)
        raise
    fill(uri, run_id, rec, artifacts, parent_run_id)
    return run_id


def fill(uri: str, run_id: str, rec: Record, artifacts: Path, parent_run_id: str | None = None, have=None) -> None:
    """Log what the run lacks (`have`: its RunData so far, when completing a half-logged run), then close it."""
    client = MlflowClient(uri)
    have_params, have_metrics = (have.params, have.metrics) if have else ({}, {})
    tags = dict(rec.tags) | ({"mlflow.parentRunId": parent_run_id} if parent_run_id else {})
    now = int(time.time() * 1000)
    try:
        client.log_batch(run_id,
                         metrics=[Metric(k, v, now, 0) for k, v in rec.metrics.items() if k not in have_metrics],
                         params=[Param(k, v[:6000]) for k, v in rec.params.items() if k not in have_params],
                         tags=[RunTag(k, v) for k, v in tags.items()])
        for f in sorted(artifacts.iterdir()):
            if f.is_file() and f.name != MARKER:
                client.log_artifact(run_id, str(f))
            elif f.is_dir():  # profile/<op>/: a profile's files
                client.log_artifacts(run_id, str(f), artifact_path=f.name)
        if have and INCOMPLETE in have.tags:
            client.delete_tag(run_id, INCOMPLETE)
    except Exception:
        set_status(uri, run_id, "FAILED", "logging failed part way: nnbench upload "
                   "completes this run", quiet=True)
        raise
    client.set_terminated(run_id, rec.status)


def set_status(uri: str, run_id: str, status: str, incomplete: str | None = None, quiet: bool = False) -> None:
    """Close a run; `incomplete` says why its data is not all there (upload completes such runs)."""
    try:
        client = MlflowClient(uri)
        if incomplete:
            client.set_tag(run_id, INCOMPLETE, incomplete)
        client.set_terminated(run_id, status)
    except Exception:
        if not quiet:
            raise


def discard(uri: str, run_id: str) -> None:
    """Close and delete a run that must not count (a second run of the same point)."""
    client = MlflowClient(uri)
    client.set_terminated(run_id, "FAILED")
    client.delete_run(run_id)


def get_runs(uri: str, run_ids: list[str]) -> dict[str, Run | None]:
    """Each run by id; None where the store has no such run (connection errors raise)."""
    client, out = MlflowClient(uri), {}
    for run_id in run_ids:
        try:
            out[run_id] = client.get_run(run_id)
        except mlflow.exceptions.MlflowException as e:
            if e.error_code != "RESOURCE_DOES_NOT_EXIST":
                raise
            out[run_id] = None
    return out


def is_complete(run: Run | None) -> bool:
    """Closed with all its data: not RUNNING, not marked incomplete, not deleted."""
    return (run is not None and run.info.status in TERMINAL and INCOMPLETE not in run.data.tags
            and run.info.lifecycle_stage == "active")


def complete_runs(uri: str, run_ids: list[str]) -> set[str]:
    return {run_id for run_id, run in get_runs(uri, run_ids).items() if is_complete(run)}


def find_runs(uri: str, experiment_id: str, filter_string: str) -> list[Run]:
    """Runs of the experiment that match an MLflow filter, as Run objects."""
    return list(MlflowClient(uri).search_runs([experiment_id], filter_string, max_results=5000))


def finished_points(uri: str, experiment_id: str, keys: set[str], fingerprint: str | None) -> set[str]:
    """Which of these point keys have a FINISHED run (of this environment, when its fingerprint is known);
    deleted runs are not searched, so they count as missing."""
    where = "attributes.status = 'FINISHED'" + (f" and tags.env_fingerprint = '{fingerprint}'" if fingerprint else "")
    found = set()
    for key in keys:  # one query per point: a filter on a tag takes one value
        if find_runs(uri, experiment_id, f"{where} and tags.point_key = '{key}'"):
            found.add(key)
    return found


def start_parent(uri: str, experiment_id: str, name: str, params: dict[str, str]) -> str:
    """The parent run that groups a sweep's points."""
    client = MlflowClient(uri)
    run = client.create_run(experiment_id, run_name=name, tags={"nnbench.sweep": "true"})
    client.log_batch(run.info.run_id, params=[Param(k, str(v)[:6000]) for k, v in params.items()])
    return run.info.run_id


def finish_parent(uri: str, run_id: str, artifacts: Path, status: str = "FINISHED") -> None:
    client = MlflowClient(uri)
    client.log_artifacts(run_id, str(artifacts))
    client.set_terminated(run_id, status)


def children(uri: str, experiment_id: str, parent_run_id: str):
    """A sweep's point runs, as a pandas DataFrame (one row per run)."""
    mlflow.set_tracking_uri(uri)
    return mlflow.search_runs(experiment_ids=[experiment_id], filter_string=f"tags.mlflow.parentRunId = "
                              f"'{parent_run_id}'", output_format="pandas", max_results=50_000)


def run_link(experiment_id: str, uri: str = "") -> str:
    """The runs table (MLflow 3 opens experiments in its GenAI view otherwise): on the tracking server itself, or
    where `mlflow ui` serves a local store."""
    server = uri.rstrip("/") if uri.startswith(("http://", "https://")) else "http://127.0.0.1:5000"
    return f"{server}/#/experiments/{experiment_id}/runs?workflowType=machine_learning"


def search(uri: str, experiment_name: str, filter_string: str = ""):
    """Runs of the experiment matching an MLflow filter, as a pandas DataFrame (one row per run)."""
    path = sqlite_path(uri)
    if path is not None and not path.exists():
        raise LookupError(f"no store at {uri}: run a sweep here first, or pass --uri")  # don't create one
    mlflow.set_tracking_uri(uri)
    with creation_lock(uri):  # a sweep may be creating this store right now
        exp = MlflowClient(uri).get_experiment_by_name(experiment_name)
    if exp is None:
        raise LookupError(f"no experiment {experiment_name!r} in {uri}")
    return mlflow.search_runs(experiment_names=[experiment_name], filter_string=filter_string,
                              output_format="pandas", max_results=50_000)


def load_samples(uri: str, run_id: str) -> dict:
    """A run's raw per-call samples (its samples.json artifact)."""
    mlflow.set_tracking_uri(uri)
    return mlflow.artifacts.load_dict(f"runs:/{run_id}/samples.json")

"""The only module that talks to MLflow: store set-up and one run per record."""
from __future__ import annotations

import os
import time
from pathlib import Path

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
# A tracking server that goes away must cost seconds per run, not minutes of retries: results are on disk.
os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "2")
os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "30")

import mlflow  # noqa: E402
from mlflow.entities import Metric, Param, RunTag  # noqa: E402
from mlflow.tracking import MlflowClient  # noqa: E402

from experiments.records import Record  # noqa: E402

DEFAULT_URI = "sqlite:///mlruns/mlflow.db"


def store_uri(configured: str | None) -> str:
    """The config key wins, then $MLFLOW_TRACKING_URI, then the local sqlite store under ./mlruns."""
    return configured or os.environ.get("MLFLOW_TRACKING_URI") or DEFAULT_URI


class StoreUnavailable(Exception):
    """The store can't be opened; the message says where and what to do."""


def open_store(uri: str, experiment_name: str) -> str:
    """prepare_store, with a failure turned into one line that names the fix."""
    try:
        if uri.startswith(("http://", "https://")):
            import urllib.request

            urllib.request.urlopen(f"{uri.rstrip('/')}/health", timeout=10).close()
        return prepare_store(uri, experiment_name)
    except Exception as e:
        first = (str(e).strip().splitlines() or [type(e).__name__])[0][:300]
        raise StoreUnavailable(f"cannot open the MLflow store at {uri} ({first}): start the tracking server, "
                               "or point mlflow.tracking_uri / MLFLOW_TRACKING_URI at a reachable store") from None


def prepare_store(uri: str, experiment_name: str) -> str:
    """Create (or migrate) the store and the experiment once, before any job logs (see the sqlite race)."""
    artifacts = None
    if uri == DEFAULT_URI:
        Path("mlruns/artifacts").mkdir(parents=True, exist_ok=True)
        artifacts = Path("mlruns/artifacts").resolve().as_uri()
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name(experiment_name)
    if exp is not None:
        return exp.experiment_id
    try:
        return client.create_experiment(experiment_name, artifact_location=artifacts)
    except mlflow.exceptions.MlflowException:  # created meanwhile by another process
        return client.get_experiment_by_name(experiment_name).experiment_id


def log_record(uri: str, experiment_id: str, rec: Record, artifacts: Path, parent_run_id: str | None = None) -> str:
    """One MLflow run per point, in a single batch call plus the point's directory; returns the run id."""
    client = MlflowClient(uri)
    tags = dict(rec.tags)
    if parent_run_id:
        tags["mlflow.parentRunId"] = parent_run_id
    run = client.create_run(experiment_id, run_name=rec.run_name, tags={"outcome": rec.outcome})
    try:
        now = int(time.time() * 1000)
        client.log_batch(run.info.run_id,
                         metrics=[Metric(k, v, now, 0) for k, v in rec.metrics.items()],
                         params=[Param(k, v[:6000]) for k, v in rec.params.items()],
                         tags=[RunTag(k, v) for k, v in tags.items()])
        client.log_artifacts(run.info.run_id, str(artifacts))
    except Exception:
        client.set_terminated(run.info.run_id, "FAILED")  # never leave a half-logged run RUNNING
        raise
    client.set_terminated(run.info.run_id, rec.status)
    return run.info.run_id


def start_parent(uri: str, experiment_id: str, name: str, params: dict[str, str]) -> str:
    """The parent run that groups a sweep's points."""
    client = MlflowClient(uri)
    run = client.create_run(experiment_id, run_name=name, tags={"nnbench.sweep": "true"})
    client.log_batch(run.info.run_id, params=[Param(k, str(v)[:6000]) for k, v in params.items()])
    return run.info.run_id


def finish_parent(uri: str, run_id: str, artifacts: Path) -> None:
    client = MlflowClient(uri)
    client.log_artifacts(run_id, str(artifacts))
    client.set_terminated(run_id, "FINISHED")


def run_link(experiment_id: str, server: str = "http://127.0.0.1:5000") -> str:
    """The runs table (MLflow 3 opens experiments in its GenAI view otherwise)."""
    return f"{server}/#/experiments/{experiment_id}/runs?workflowType=machine_learning"


def search(uri: str, experiment_name: str, filter_string: str = ""):
    """Runs of the experiment matching an MLflow filter, as a pandas DataFrame (one row per run)."""
    if uri.startswith("sqlite:///") and not Path(uri.removeprefix("sqlite:///")).exists():
        raise LookupError(f"no store at {uri}: run a sweep here first, or pass --uri")  # don't create one
    mlflow.set_tracking_uri(uri)
    if MlflowClient(uri).get_experiment_by_name(experiment_name) is None:
        raise LookupError(f"no experiment {experiment_name!r} in {uri}")
    return mlflow.search_runs(experiment_names=[experiment_name], filter_string=filter_string,
                              output_format="pandas", max_results=50_000)


def load_samples(uri: str, run_id: str) -> dict:
    """A run's raw per-call samples (its samples.json artifact)."""
    mlflow.set_tracking_uri(uri)
    return mlflow.artifacts.load_dict(f"runs:/{run_id}/samples.json")

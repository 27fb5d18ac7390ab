"""The only module that talks to MLflow: a `Store` at one URI, set up once, with one run per record, never two, never
one left RUNNING, and its runs read back.

A point's run is created first (with the point's directory as a tag) and its id goes to the point's
`mlflow_run_id` marker before the run is filled, so a run caught half-logged by a store failure is found and
completed later (`upload`), not logged a second time.
"""
from __future__ import annotations

import contextlib
import fcntl
import functools
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Callable

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
# A tracking server that goes away must cost seconds per run, not minutes of retries: results are on disk.
os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "2")
os.environ.setdefault("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "1")  # an int: sleeps 1 s, then 2 s
os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "30")
os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")  # "🏃 View run" per run on a server
# A command's output is its table: no "Downloading artifacts: 100%|███" bar per run whose artifact it reads.
os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
# Without a git executable GitPython prints a 15-line banner on each of MLflow's context lookups; quiet, the git
# tags are simply absent. Read when git is first imported.
os.environ.setdefault("GIT_PYTHON_REFRESH", "quiet")

import logging  # noqa: E402

import mlflow  # noqa: E402
import pandas as pd  # noqa: E402  (mlflow imports it already)
import mlflow.store.db.utils  # noqa: E402
from mlflow.entities import Metric, Param, Run, RunTag  # noqa: E402
from mlflow.tracking import MlflowClient  # noqa: E402

from experiments.common.errors import first_line  # noqa: E402
from experiments.store import view  # noqa: E402
from experiments.store.records import FORMAT_TAG, NOTE, Record  # noqa: E402
from experiments.store.sweepdir import MARKER  # noqa: E402
from experiments.store.uris import DEFAULT_URI, failure, sqlite_path  # noqa: E402

# MLflow retries a database it can't open 10 times with growing sleeps (104 s for sqlite:////proc/nope.db);
# three tries still ride out a database that is starting.
mlflow.store.db.utils.MAX_RETRY_COUNT = 3
# On stderr, "Creating initial MLflow database tables..." at every new store, and a full traceback for each
# database error that MLflow then raises anyway (a full disk printed 449 lines): the caller reports it in one line.
logging.getLogger("alembic").setLevel(logging.WARNING)
logging.getLogger("mlflow.store.db.utils").setLevel(logging.CRITICAL)
POINT_DIR, INCOMPLETE = "nnbench.point_dir", "nnbench.incomplete"  # tags: where a run's point is, why it's unfinished
UPLOAD_COMPLETES = "nnbench upload completes this run"  # how an INCOMPLETE tag ends: why, then the repair
TERMINAL = ("FINISHED", "FAILED", "KILLED")
SWEEP = "nnbench.sweep"  # tags a sweep's parent run
# The tags `mlflow.start_run` adds from MLflow's context registry, which `MlflowClient.create_run` does not: the UI's
# User, Source and Version columns and the run page's "Created by" and "Source".
CONTEXT = ("mlflow.user", "mlflow.source.")
RUN_NOTE_CHARS = 8000  # MLflow cuts a longer run description silently
HEADLINE = "nnbench.headline"  # tags a sweep's parent run with the headline its name carries
VIEW_SETTLE_S = 0.2  # how long a sweep's close waits before it checks that the runs table kept its columns


class StoreUnavailable(Exception):
    """The store can't be opened; the message says where and what to do."""


class ArtifactsNotStored(Exception):
    """The store took a run's data but not its files."""


def incomplete_reason(run: Run) -> str | None:
    """Why a run's data is not all in the store, as its INCOMPLETE tag says."""
    why = run.data.tags.get(INCOMPLETE)
    return why.split("; nnbench upload")[0] if why else None


def is_complete(run: Run | None) -> bool:
    """Closed with all its data: not RUNNING, not marked incomplete, not deleted."""
    return (run is not None and run.info.status in TERMINAL and INCOMPLETE not in run.data.tags
            and run.info.lifecycle_stage == "active")


def context_tags() -> dict[str, str]:
    """The user, source and git commit of this process, as `mlflow.start_run` records them (resolved once per
    sweep, in the process that starts its parent run; point runs copy the parent's)."""
    from mlflow.tracking.context.registry import resolve_tags  # not at the top: imports git (0.2 s), once per sweep

    return {k: v for k, v in resolve_tags().items() if k.startswith(CONTEXT)}


class Store:
    """The MLflow store at one URI, through one client: its experiment set up, its runs written and read back. Two
    Stores at one URI are one store: what one has read of a parent run, the other does not read again."""

    def __init__(self, uri: str):
        self.uri = uri

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Store) and other.uri == self.uri

    def __hash__(self) -> int:
        return hash(self.uri)

    @functools.cached_property
    def client(self) -> MlflowClient:
        """The store's client, made on first use: making one opens the store (and creates a sqlite one)."""
        return MlflowClient(self.uri)

    def artifacts_failed(self, e: Exception) -> str:
        """Why a run's artifacts are not in the store, in a few words. A tracking server that took the run's params
        and metrics but not its files answers with HTTP 500 (its artifact destination full or read-only, while its
        database answers); the client only sees the failed upload, retried until the server reset the connection."""
        if self.uri.startswith(("http://", "https://")):
            return (f"the tracking server at {self.uri} took the runs but not their artifacts: its artifact "
                    "destination may be full or read-only")
        return f"the store's artifacts could not be written ({first_line(e)})"

    @contextlib.contextmanager
    def creation_lock(self):
        """One process at a time creates or migrates a sqlite store: parallel creation races in the schema migration
        ("duplicate column name: step", "Online migration expected") and once left a database broken."""
        path = sqlite_path(self.uri)
        if path is None:
            yield
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path.with_name(path.name + ".lock"), "a") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            yield

    def open(self, experiment_name: str, option: str = "mlflow.tracking_uri") -> str:
        """`prepare`, with a failure turned into one line that names the fix (`option`: what sets the URI)."""
        try:
            with self.creation_lock():
                return self.prepare(experiment_name)
        except StoreUnavailable:
            raise
        except Exception as e:
            raise StoreUnavailable(failure(self.uri, e, option)) from None

    def prepare(self, experiment_name: str) -> str:
        """Create (or migrate) the store and the experiment once, before any job logs; a server is asked again when
        another sweep creates the same experiment at the same moment."""
        artifacts = None
        if self.uri == DEFAULT_URI:
            Path("mlruns/artifacts").mkdir(parents=True, exist_ok=True)
            artifacts = Path("mlruns/artifacts").resolve().as_uri()
        for attempt in range(3):
            exp = self.client.get_experiment_by_name(experiment_name)
            if exp is not None and exp.lifecycle_stage == "deleted":
                raise StoreUnavailable(f"experiment {experiment_name!r} is deleted: restore it, or choose another "
                                       "mlflow.experiment_name")
            if exp is not None:
                self.describe_experiment(exp.experiment_id, exp.tags)
                return exp.experiment_id
            try:
                exp_id = self.client.create_experiment(experiment_name, artifact_location=artifacts)
            except mlflow.exceptions.MlflowException:  # created meanwhile by another process: read it again
                if attempt == 2:
                    raise
                time.sleep(0.5 * (attempt + 1))
                continue
            self.describe_experiment(exp_id, {})
            return exp_id
        raise AssertionError("unreachable")

    def describe_experiment(self, experiment_id: str, tags: dict[str, str], shown: tuple[str, ...] = ()) -> None:
        """The experiment's description and the runs table's columns (`view.experiment_tags`), set where its `tags`
        differ. Read back and merged again while another sweep's write took this one's columns out (two sweeps
        closing at once each read the view before the other wrote it)."""
        for _ in range(5):
            wanted = view.experiment_tags(tags, shown)
            if all(tags.get(k) == value for k, value in wanted.items()):
                return
            for k, value in wanted.items():
                if tags.get(k) != value:
                    self.client.set_experiment_tag(experiment_id, k, value)
            if not shown:
                return
            time.sleep(VIEW_SETTLE_S)  # a write read before this one's lands within milliseconds: then it is seen
            tags = self.client.get_experiment(experiment_id).tags
            if view.shows(tags, shown):
                return

    @functools.cache  # per store and parent run, once per process: a sweep's points share their parent's
    def context_of(self, parent_run_id: str | None) -> dict[str, str]:
        """A point run's context tags: its parent's (a launcher's process has another argv[0] and maybe no git), or
        this process's for a run without a parent."""
        if parent_run_id is None:
            return context_tags()
        return {k: v for k, v in self.client.get_run(parent_run_id).data.tags.items() if k.startswith(CONTEXT)}

    def log_record(self, experiment_id: str, rec: Record, artifacts: Path, parent_run_id: str | None = None,
                   on_created: Callable[[str], None] = lambda run_id: None) -> str:
        """One MLflow run per point; `on_created` gets its id (to write the marker) before the run is filled."""
        tags = self.context_of(parent_run_id) | {"outcome": rec.outcome, POINT_DIR: str(artifacts.resolve())}
        if parent_run_id:
            tags["mlflow.parentRunId"] = parent_run_id
        run_id = self.client.create_run(experiment_id, run_name=rec.run_name, tags=tags).info.run_id  # mlflow.user
        try:
            on_created(run_id)
        except Exception:  # no marker names it: close and hide it, or upload would log the point a second time
            with contextlib.suppress(Exception):
                self.discard(run_id)
            raise
        self.fill(run_id, rec, artifacts, parent_run_id)
        return run_id

    def fill(self, run_id: str, rec: Record, artifacts: Path, parent_run_id: str | None = None, have=None) -> None:
        """Log what the run lacks (`have`: its RunData so far, when completing a half-logged run), then close it."""
        have_params, have_metrics = (have.params, have.metrics) if have else ({}, {})
        tags = dict(rec.tags) | ({"mlflow.parentRunId": parent_run_id} if parent_run_id else {})
        now = int(time.time() * 1000)
        try:
            self.client.log_batch(
                run_id, metrics=[Metric(k, v, now, 0) for k, v in rec.metrics.items() if k not in have_metrics],
                params=[Param(k, v[:6000]) for k, v in rec.params.items() if k not in have_params],
                tags=[RunTag(k, v) for k, v in tags.items()])
            with tempfile.TemporaryDirectory() as tmp:  # the artifacts in one call, without the run-id marker
                for f in artifacts.iterdir():
                    if f.is_file() and f.name != MARKER:
                        shutil.copy2(f, tmp)
                    elif f.is_dir():  # profile/<op>/: a profile's files
                        shutil.copytree(f, Path(tmp) / f.name)
                self.log_artifacts(run_id, tmp)
            if have and INCOMPLETE in have.tags:
                self.client.delete_tag(run_id, INCOMPLETE)
        except Exception as e:
            self.set_status(run_id, "FAILED", f"{first_line(e)}; {UPLOAD_COMPLETES}", quiet=True)
            raise
        self.client.set_terminated(run_id, rec.status)

    def log_artifacts(self, run_id: str, directory: str) -> None:
        try:
            self.client.log_artifacts(run_id, directory)
        except Exception as e:
            raise ArtifactsNotStored(self.artifacts_failed(e)) from None

    def set_status(self, run_id: str, status: str, incomplete: str | None = None, quiet: bool = False) -> None:
        """Close a run; `incomplete` says why its data is not all there (upload completes such runs). Tried twice:
        after a server reset the connection of a failed upload, the next request on its pooled connection fails
        once."""
        for attempt in (1, 2):
            try:
                if incomplete:
                    self.client.set_tag(run_id, INCOMPLETE, incomplete)
                self.client.set_terminated(run_id, status)
                return
            except Exception:
                if attempt == 2 and not quiet:
                    raise

    def discard(self, run_id: str) -> None:
        """Close and delete a run that must not count (a second run of the same point)."""
        self.client.set_terminated(run_id, "FAILED")
        self.client.delete_run(run_id)

    def start_parent(self, experiment_id: str, name: str, params: dict[str, str], parent_run_id: str | None = None,
                     kind: str = "sweep") -> str:
        """A parent run, with this process's user, source and commit: a sweep's (its points go under it), or
        `versions`', `bisect`'s or `history`'s (tagged `nnbench.<kind>`); nested under `parent_run_id` where given
        (a sweep that `versions` or `bisect` started)."""
        tags = context_tags() | {f"nnbench.{kind}": "true"}
        if parent_run_id:
            tags["mlflow.parentRunId"] = parent_run_id
        run = self.client.create_run(experiment_id, run_name=view.shortened(name), tags=tags)
        self.client.log_batch(run.info.run_id, params=[Param(k, str(v)[:6000]) for k, v in params.items()])
        return run.info.run_id

    def set_tags(self, run_id: str, tags: dict[str, str]) -> None:
        self.client.log_batch(run_id, tags=[RunTag(k, str(v)[:5000]) for k, v in tags.items()])

    def finish_parent(self, run_id: str, artifacts: Path, status: str = "FINISHED", note: str = "",
                      metrics: dict[str, float] | None = None, tags: dict[str, str] | None = None) -> None:
        """A parent's answer: the description (`note`, Markdown), metrics, tags and the report's artifacts; then its
        status. A HEADLINE among the tags also goes into the run's name, and the geometric means
        (`view.answer_metrics`) become columns of the runs table."""
        if len(note) > RUN_NOTE_CHARS:  # cut at a whole line, and say so, rather than mid-row as MLflow would
            note = note[:RUN_NOTE_CHARS - 60].rsplit("\n", 1)[0] + "\n\n_(cut here: the whole table is in report.md)_"
        now = int(time.time() * 1000)
        tags = (tags or {}) | ({NOTE: note} if note else {})
        try:
            run = self.client.get_run(run_id)
            self.client.log_batch(run_id, metrics=[Metric(k, v, now, 0) for k, v in (metrics or {}).items()],
                                  tags=[RunTag(k, v) for k, v in tags.items()])
            if headline := tags.get(HEADLINE):
                self.client.update_run(run_id, name=view.titled(run.info.run_name, headline,
                                                                run.data.tags.get(HEADLINE)))
            if shown := view.answer_metrics(metrics or {}):
                exp = self.client.get_experiment(run.info.experiment_id)
                self.describe_experiment(exp.experiment_id, exp.tags, shown)
            self.log_artifacts(run_id, str(artifacts))
            if INCOMPLETE in run.data.tags:  # an earlier close failed part way
                self.client.delete_tag(run_id, INCOMPLETE)
        except Exception as e:  # never left RUNNING: upload closes it again
            self.set_status(run_id, "FAILED", f"{first_line(e)}; nnbench upload completes this sweep", quiet=True)
            raise
        self.client.set_terminated(run_id, status)

    def get_runs(self, run_ids: list[str]) -> dict[str, Run | None]:
        """Each run by id; None where the store has no such run (connection errors raise)."""
        out = {}
        for run_id in run_ids:
            try:
                out[run_id] = self.client.get_run(run_id)
            except mlflow.exceptions.MlflowException as e:
                if e.error_code != "RESOURCE_DOES_NOT_EXIST":
                    raise
                out[run_id] = None
        return out

    def find_runs(self, experiment_id: str, filter_string: str) -> list[Run]:
        """Every run of the experiment that matches an MLflow filter, as Run objects (page by page)."""
        runs, token = [], None
        while True:
            page = self.client.search_runs([experiment_id], filter_string, max_results=5000, page_token=token)
            runs += page
            if not (token := page.token):
                return runs

    def finished_points(self, experiment_id: str, keys: set[str], fingerprint: str | None) -> set[str]:
        """Which of these point keys have a FINISHED run (of this environment, when its fingerprint is known);
        deleted runs are not searched, so they count as missing."""
        where = "attributes.status = 'FINISHED'" + (f" and tags.env_fingerprint = '{fingerprint}'"
                                                    if fingerprint else "")
        # one search: a filter on a tag takes one value, so the keys are matched here
        return keys & {r.data.tags.get("point_key") for r in self.find_runs(experiment_id, where)}

    def latest_sweep(self, experiment_name: str) -> Run | None:
        """The most recent sweep's parent run in the experiment, if any."""
        exp = self.client.get_experiment_by_name(experiment_name)
        found = self.client.search_runs([exp.experiment_id], f"tags.`{SWEEP}` = 'true'", max_results=1,
                                        order_by=["attributes.start_time DESC"]) if exp else []
        return found[0] if found else None

    def sweep_run_id(self, experiment_name: str, given: str | None) -> str | None:
        """A sweep's parent run id as given (`--sweep RUN_ID|last`): `last` is the newest sweep; LookupError if
        none."""
        if given != "last":
            return given
        if (latest := self.latest_sweep(experiment_name)) is None:
            raise LookupError(f"--sweep last: no sweep in experiment {experiment_name!r} at {self.uri}")
        return latest.info.run_id

    def children(self, experiment_id: str, parent_run_id: str):
        """A sweep's point runs, as a pandas DataFrame (one row per run)."""
        mlflow.set_tracking_uri(self.uri)
        return upgraded(mlflow.search_runs(experiment_ids=[experiment_id], filter_string=f"tags.mlflow.parentRunId "
                                           f"= '{parent_run_id}'", output_format="pandas", max_results=50_000))

    def search(self, experiment_name: str, filter_string: str = ""):
        """Runs of the experiment matching an MLflow filter, as a pandas DataFrame (one row per run)."""
        path = sqlite_path(self.uri)
        if path is not None and not path.exists():
            raise LookupError(f"no store at {self.uri}: run a sweep here first, or pass --uri")  # don't create one
        mlflow.set_tracking_uri(self.uri)
        with self.creation_lock():  # a sweep may be creating this store right now
            exp = self.client.get_experiment_by_name(experiment_name)
        if exp is None:
            raise LookupError(f"no experiment {experiment_name!r} in {self.uri}")
        return upgraded(mlflow.search_runs(experiment_names=[experiment_name], filter_string=filter_string,
                                           output_format="pandas", max_results=50_000))

    def load_samples(self, run_id: str) -> dict:
        """A run's raw per-call samples (its samples.json artifact)."""
        mlflow.set_tracking_uri(self.uri)
        return mlflow.artifacts.load_dict(f"runs:/{run_id}/samples.json")


# What format-1 runs (records.FORMAT) kept as tags and format 2 keeps as metrics: the host's numbers.
FORMER_TAGS = ("cpu_count_logical", "cpu_count_physical", "cpu_affinity", "memory_total_bytes", "load_avg_1m")


def upgraded(runs: pd.DataFrame) -> pd.DataFrame:
    """Runs (`mlflow.search_runs` rows) as this nnbench writes them: those of an older record format are migrated on
    read, so that every command reads old and new runs alike. Format 1 (no FORMAT_TAG): the machine numbers and the
    parameter count become metrics, and a skipped point FINISHED."""
    if "params.model" not in runs:
        return runs
    old = runs[f"tags.{FORMAT_TAG}"].isna() if f"tags.{FORMAT_TAG}" in runs else pd.Series(True, index=runs.index)
    if not old.any():
        return runs
    runs = runs.copy()
    for key, source in [(k, f"tags.{k}") for k in FORMER_TAGS] + [("param_count", "params.param_count")]:
        if source in runs:
            have = runs.get(f"metrics.{key}", pd.Series(float("nan"), index=runs.index))
            runs[f"metrics.{key}"] = have.mask(old & have.isna(), pd.to_numeric(runs[source], errors="coerce"))
    if "tags.outcome" in runs:
        runs.loc[old & (runs["tags.outcome"] == "skipped") & (runs["status"] == "KILLED"), "status"] = "FINISHED"
    return runs

"""The one module that talks to MLflow, on a real sqlite store: a point's run named by its marker before it is
filled, completed (never logged twice) after a failure, resume's lookup, a parent's description, headline and
the runs table's columns, and the UI's links."""
import json
import sys
import types

import pytest
from mlflow.entities import ViewType
from mlflow.tracking import MlflowClient
from mlflow.utils.file_utils import ArtifactProgressBar

from experiments.store import tracking, view
from experiments.store.records import NOTE, Record
from tests.helpers import with_store


def record(key: str = "k1", fingerprint: str = "f1") -> Record:
    return Record("lenet · jax-jit · fp32 · bs8", "lenet-jax-jit-fp32-bs8", "ok", {"model": "lenet", "batch_size": "8"},
                  {"inference_median_s": 0.001}, {"outcome": "ok", "point_key": key, "env_fingerprint": fingerprint,
                                                  NOTE: "one line"})


@pytest.fixture
def opened(tmp_path):
    """A sqlite store with the nnbench experiment: (its Store, the experiment's id)."""
    store = tracking.Store(f"sqlite:///{with_store(tmp_path)}/mlruns/mlflow.db")
    return store, store.open("nnbench")


def test_a_run_is_named_by_its_marker_before_it_is_filled(opened, tmp_path):
    store, exp = opened
    uri = store.uri
    rec, seen = record(), []
    rec.save(tmp_path / "p")

    def marker(run_id: str) -> None:
        seen.append((run_id, dict(MlflowClient(uri).get_run(run_id).data.params)))

    run_id = store.log_record(exp, rec, tmp_path / "p", on_created=marker)
    assert seen == [(run_id, {})]  # the marker had the id while the run was still empty
    run = MlflowClient(uri).get_run(run_id)
    assert run.info.status == "FINISHED" and tracking.is_complete(run) and run.info.run_name == rec.run_name
    assert run.data.params == rec.params and run.data.metrics == rec.metrics
    assert run.data.tags[tracking.POINT_DIR] == str((tmp_path / "p").resolve())
    names = {a.path for a in MlflowClient(uri).list_artifacts(run_id)}
    assert {"record.json", "config.yaml", "environment.json"} <= names


def test_a_run_no_marker_names_is_discarded(opened, tmp_path):
    store, exp = opened
    uri = store.uri
    record().save(tmp_path / "p")

    def full_disk(run_id: str) -> None:
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError):
        store.log_record(exp, record(), tmp_path / "p", on_created=full_disk)
    (run,) = MlflowClient(uri).search_runs([exp], run_view_type=ViewType.ALL)
    assert run.info.lifecycle_stage == "deleted" and not tracking.is_complete(run)


def test_a_half_logged_run_is_completed_with_what_it_lacks(opened, tmp_path):
    store, exp = opened
    uri = store.uri
    rec = record()
    rec.save(tmp_path / "p")
    client = MlflowClient(uri)
    run_id = client.create_run(exp, run_name=rec.run_name).info.run_id
    client.log_param(run_id, "model", "lenet")  # logged before the store failed
    store.set_status(run_id, "FAILED", "logging failed part way")
    assert not tracking.is_complete(client.get_run(run_id))
    store.fill(run_id, rec, tmp_path / "p", have=client.get_run(run_id).data)
    run = client.get_run(run_id)
    assert tracking.is_complete(run) and run.data.params == rec.params and tracking.INCOMPLETE not in run.data.tags


def test_resume_finds_finished_points_of_the_same_environment(opened, tmp_path):
    store, exp = opened
    for key, fingerprint in (("k1", "f1"), ("k2", "f2")):
        record(key, fingerprint).save(tmp_path / key)
        store.log_record(exp, record(key, fingerprint), tmp_path / key)
    assert store.finished_points(exp, {"k1", "k2", "k3"}, "f1") == {"k1"}
    assert store.finished_points(exp, {"k1", "k2", "k3"}, None) == {"k1", "k2"}


@pytest.mark.slow
def test_a_parent_description_is_cut_at_a_whole_line(opened, tmp_path):
    store, exp = opened
    uri = store.uri
    parent = store.start_parent(exp, "sweep", {"overrides": "model=lenet"})
    (tmp_path / "report").mkdir()
    store.finish_parent(parent, tmp_path / "report", note="| a row of the table |\n" * 1000)
    run = MlflowClient(uri).get_run(parent)
    note = run.data.tags[NOTE]
    assert len(note) <= tracking.RUN_NOTE_CHARS and note.endswith("_(cut here: the whole table is in report.md)_")
    assert run.data.tags[tracking.SWEEP] == "true" and store.latest_sweep("nnbench").info.run_id == parent


def view_columns(uri: str) -> list[str]:
    tags = MlflowClient(uri).get_experiment_by_name("nnbench").tags
    return json.loads(tags[f"mlflow.sharedViewState.{view.VIEW}"])["selectedColumns"]


def test_a_sweeps_headline_leads_its_name_and_its_speedups_become_columns(opened, tmp_path):
    store, exp = opened
    uri = store.uri
    parent = store.start_parent(exp, "sweep 2026-12-02 01:53:19 · framework=jax,torch model=lenet", {})
    (tmp_path / "report").mkdir()
    speedup = "speedup_inference_jax-jit_fp32_vs_torch-eager_fp32"
    for head in ("jax-jit fp32: inference 1.20× slower", "jax-jit fp32: inference 1.84× slower"):  # closed twice
        store.finish_parent(parent, tmp_path / "report", metrics={speedup: 0.5435, "points_finished": 8},
                            tags={tracking.HEADLINE: head})
    run = MlflowClient(uri).get_run(parent)
    assert run.info.run_name == ("sweep 2026-12-02 01:53:19 · jax-jit fp32: inference 1.84× slower · "
                                 "framework=jax,torch model=lenet")
    assert view_columns(uri)[:2] == ["attributes.`Description`", "metrics.`points_finished`"]
    assert view_columns(uri).count(f"metrics.`{speedup}`") == 1 and "metrics.`points_finished`" in view_columns(uri)
    store.open("nnbench")  # a later sweep or `nnbench ui` keeps the columns earlier sweeps added
    assert f"metrics.`{speedup}`" in view_columns(uri)
    long = view.titled("sweep 2026-12-02 01:53:19 · " + "model=lenet " * 40, "jax-jit fp32: inference 2× faster",
                       None)
    assert len(long) == view.RUN_NAME_CHARS and long.startswith("sweep 2026-12-02 01:53:19 · jax-jit fp32: inf")


def test_links_open_the_model_training_view():
    assert view.run_link("1", "sqlite:///x.db", "abc") == (
        "http://127.0.0.1:5000/#/experiments/1/runs/abc?workflowType=machine_learning")
    assert view.run_link("1", "http://server:8080/").startswith("http://server:8080/#/experiments/1/runs?")


@pytest.mark.slow
def test_two_sweeps_closing_at_once_keep_each_others_columns(opened, monkeypatch):
    """Sweep B read the view before sweep A wrote it, and writes just after: A, checking back, merges again."""
    store, exp = opened
    uri = store.uri
    client = MlflowClient(uri)
    stale = client.get_experiment(exp).tags
    a, b = "speedup_inference_jax-jit_fp32_vs_torch-eager_fp32", "speedup_training_jax-jit_fp32_vs_torch-eager_fp32"
    real_sleep = tracking.time.sleep

    def b_writes_meanwhile(seconds):  # B's close lands while A waits to check
        monkeypatch.setattr(tracking.time, "sleep", real_sleep)
        store.describe_experiment(exp, stale, (b,))

    monkeypatch.setattr(tracking.time, "sleep", b_writes_meanwhile)
    store.describe_experiment(exp, stale, (a,))
    assert {f"metrics.`{a}`", f"metrics.`{b}`"} <= set(view_columns(uri))


@pytest.mark.slow
def test_a_long_command_line_names_its_parent_within_mlflows_250_characters(opened):
    """PostgreSQL's runs.name is VARCHAR(250): a sweep's name is cut when the run starts, not only when it closes."""
    store, exp = opened
    uri = store.uri
    parent = store.start_parent(exp, "sweep 2026-12-02 01:53:19 · " + "model=lenet " * 40, {})
    name = MlflowClient(uri).get_run(parent).info.run_name
    assert len(name) == view.RUN_NAME_CHARS and name.endswith("…") and name.startswith("sweep 2026-12-02")


def test_stores_at_one_uri_read_a_parents_context_once(opened, monkeypatch):
    """Each point's run is logged through a Store of its own; Stores at one URI are one store, so the parent's user
    and source are read once per process, not once per point."""
    store, exp = opened
    parent = store.start_parent(exp, "sweep", {})
    reads, get_run = [], MlflowClient.get_run
    monkeypatch.setattr(MlflowClient, "get_run", lambda client, run_id: reads.append(run_id) or get_run(client, run_id))
    contexts = [tracking.Store(store.uri).context_of(parent) for _ in range(3)]
    assert reads == [parent] and contexts[0] == contexts[2] and tracking.Store(store.uri) == store


def test_opening_the_store_turns_mlflows_download_bar_off(monkeypatch):
    """MLflow draws "Downloading artifacts: 100%|███" with tqdm, where tqdm is installed, on every download from a
    tracking server (a command that reads samples would print one per run above its table). The store's module
    turns it off for the process, unless the user's environment says otherwise. A stand-in tqdm records whether
    MLflow asks for a bar."""
    drawn = []
    fake = types.ModuleType("tqdm.auto")
    fake.tqdm = lambda **kw: drawn.append(kw["desc"])
    monkeypatch.setitem(sys.modules, "tqdm.auto", fake)
    monkeypatch.setitem(sys.modules, "tqdm", types.ModuleType("tqdm"))
    assert tracking.os.environ["MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"] == "false"
    with ArtifactProgressBar.files(desc="Downloading artifacts", total=3):
        pass
    assert drawn == []
    monkeypatch.setenv("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "true")  # the stand-in draws when MLflow asks
    with ArtifactProgressBar.files(desc="Downloading artifacts", total=3):
        pass
    assert drawn == ["Downloading artifacts"]

"""How the store reads in MLflow's UI: the experiment's description, the runs table's columns (the experiment's shared
view), run names within MLflow's limits, and links to the runs table and to a run's page. Plain data and strings:
`tracking` writes them to the store."""
from __future__ import annotations

import json
import re

from experiments.store.records import NOTE
from experiments.store.uris import UI_PORT

RUN_NAME_CHARS = 250  # runs.name is VARCHAR(250): PostgreSQL refuses a longer one
VIEW = "nnbench"  # the runs table's columns, read from the experiment tag mlflow.sharedViewState.<VIEW>
VIEW_TAG = f"mlflow.sharedViewState.{VIEW}"
ML_VIEW = "workflowType=machine_learning"  # MLflow 3's "Model training" view; without it links open GenAI pages
EXPERIMENT_NOTE = """**nnbench**: JAX/Flax vs PyTorch, eager vs compiled, for inference and a training step.

Each sweep is one parent run (`sweep <date> <time> · <headline> · <overrides>`); its **description** answers the
comparison: which variant is faster for each point, by how much and how sure, with the machine and the versions.
Its metrics `speedup_<op>_<variant>_vs_<baseline>` are geometric-mean speedups against the baseline
(`torch-eager fp32` unless `report.baseline` says otherwise; above 1 is faster), and its artifacts hold the report
and the plots.

Each point (model, variant, precision, batch size) is one child run, e.g. `lenet · jax-jit · fp32 · bs32`. Its
metrics per op (`inference_`, `training_`, `grad_`): `median_s` (the median over processes of each fresh
process's median per call), `ci95_low_s`/`ci95_high_s` (where a re-run of the point is expected to read, 95%),
`process_spread`, `throughput_samples_per_s`, `first_call_s` (compile plus the first run), `flops`, `mfu`,
`peak_mem_bytes` (the host's), `device_peak_mem_bytes` (an accelerator's). Tags `noisy=true` (other processes used
the CPU) and `unstable=true` (a re-run may read far from this one) flag numbers to read with care. Status FINISHED
means measured (`outcome=skipped`: an op the model doesn't have), FAILED a fault (`failure_reason`), KILLED an
interrupt."""

# The runs table's columns, chosen so that a collapsed sweep row answers on a 1600 px screen: its headline in the
# Description column (the first 50 characters of a run's description; a point's row shows its medians there), the
# point counts and the geometric means. MLflow orders the columns itself (pinned name and date, Duration, then
# attributes, metrics by name, params), and the columns of 100 px past those fill the screen: User, Source and the
# points' metrics are one click away in "Columns".
COLUMNS = ["attributes.`Description`", "metrics.`points_finished`", "metrics.`points_skipped`",
           "metrics.`points_failed`", "params.`mode`", "params.`batch_size`"]
ANSWER_COLUMNS = "metrics.`speedup_"  # a sweep's geometric means (report.answer.metric_name), added as sweeps log them
# ...but not what the run page lists beside them: their intervals, and each cell's speedup (`speedup_<op>_bs<N>_...`,
# which sort before the means and would push them off the first screen)
NOT_COLUMNS = re.compile(r"_ci95_(low|high)$|^speedup_[a-z]+_bs\d+_")


def experiment_tags(tags: dict[str, str], shown: tuple[str, ...] = ()) -> dict[str, str]:
    """The experiment's description and runs-table view (link with `?viewStateShareKey=nnbench`) as its tags should
    hold them, given the `tags` it holds: COLUMNS, the answer columns earlier sweeps added and the metrics `shown`."""
    had = set(answer_columns(tags.get(VIEW_TAG)))
    view = {"selectedColumns": COLUMNS + sorted(had | {f"metrics.`{m}`" for m in shown}),
            "orderByKey": "attributes.start_time", "orderByAsc": False}
    return {NOTE: EXPERIMENT_NOTE, VIEW_TAG: json.dumps(view)}


def shows(tags: dict[str, str], shown: tuple[str, ...]) -> bool:
    """Whether the view the experiment's `tags` hold selects every metric `shown`."""
    return {f"metrics.`{m}`" for m in shown} <= set(answer_columns(tags.get(VIEW_TAG)))


def answer_columns(view: str | None) -> list[str]:
    """The answer columns a stored view selects ([] for none, or a view not in nnbench's JSON: written anew)."""
    try:
        return [c for c in json.loads(view or "{}").get("selectedColumns", []) if c.startswith(ANSWER_COLUMNS)]
    except (ValueError, AttributeError):
        return []


def answer_metrics(metrics: dict[str, float]) -> tuple[str, ...]:
    """The metrics of a sweep's answer that become columns of the runs table: its geometric means."""
    return tuple(m for m in metrics if f"metrics.`{m}".startswith(ANSWER_COLUMNS) and not NOT_COLUMNS.search(m))


def titled(name: str, headline: str, had: str | None) -> str:
    """A sweep's run name with its headline after the date, where the run page's title shows it on the first screen
    even where MLflow stacks "About this run" above the description (1024 px wide; at 1280 px, side by side):
    `sweep <date> <time> · <headline> · <overrides>` (the headline an earlier close wrote replaced), at most
    MLflow's 250 characters (runs.name on PostgreSQL), the overrides cut first."""
    if had:
        name = name.replace(f" · {had}", "", 1)
    when, _, overrides = name.partition(" · ")
    return shortened(" · ".join(filter(None, [when, headline, overrides])))


def shortened(name: str) -> str:
    """A run name cut to MLflow's RUN_NAME_CHARS (a long command line's overrides), its end marked."""
    return name if len(name) <= RUN_NAME_CHARS else name[:RUN_NAME_CHARS - 1] + "…"


def ui_base(uri: str, port: int = UI_PORT) -> str:
    """Where the UI of this store is: the tracking server itself, or where `nnbench ui` serves a local store."""
    return uri.rstrip("/") if uri.startswith(("http://", "https://")) else f"http://127.0.0.1:{port}"


def run_link(experiment_id: str, uri: str = "", run_id: str | None = None, port: int = UI_PORT) -> str:
    """The runs table (with nnbench's columns), or one run's page, in the UI's "Model training" view (MLflow 3
    opens its GenAI view otherwise; a `#/runs/<id>` link would drop the view)."""
    base = f"{ui_base(uri, port)}/#/experiments/{experiment_id}/runs"
    return f"{base}/{run_id}?{ML_VIEW}" if run_id else f"{base}?{ML_VIEW}&viewStateShareKey={VIEW}"

"""The run selection the reading commands share (`key=value`, `--filter`, `--sweep`, `--uri`, `--experiment`,
`--exclude-noisy`) and the store option, read the same way by every command that takes them."""
from __future__ import annotations

import argparse

from experiments.common.errors import BadInput, first_line
from experiments.store.select import filter_string
from experiments.store.uris import DEFAULT_URI, store_uri


def add_uri(p: argparse.ArgumentParser, default: str | None = None) -> None:
    p.add_argument("--uri", help=default or f"tracking URI (default: $MLFLOW_TRACKING_URI, else {DEFAULT_URI})")


def add_selection(p: argparse.ArgumentParser) -> None:
    """The run selection: key=value pairs, --filter, --sweep, --uri, --experiment, --exclude-noisy."""
    p.add_argument("filters", nargs="*", metavar="key=value",
                   help="a param (model, framework, mode, precision, batch_size, device, ...) or a tag "
                        "(torch_version, env_fingerprint, ...)")
    p.add_argument("--filter", help="an MLflow filter string, AND-ed with the pairs")
    p.add_argument("--sweep", help="the parent run id of a sweep: its points only")
    add_uri(p)
    p.add_argument("--experiment", default="nnbench", help="MLflow experiment (default %(default)s)")
    p.add_argument("--exclude-noisy", action="store_true",
                   help="leave out runs tagged noisy=true (other processes used the CPU while they were measured)")


def select(a: argparse.Namespace):
    """The selected runs as `report.tables.tidy` rows, the store's URI and the filter string; BadInput (one line
    naming the fix) for a bad filter, a store that can't be read, or nothing selected."""
    from experiments.report import tables  # pandas and mlflow are slow to import: only after parsing
    from experiments.store import tracking

    uri = store_uri(a.uri)
    try:
        fs = filter_string(a.filters, a.filter, a.sweep)
        t = tables.tidy(tracking.search(uri, a.experiment, fs))
    except Exception as e:  # a bad filter, an unreachable store, no such experiment: the store's own words
        raise BadInput(first_line(e)) from None
    if a.exclude_noisy and not t.empty and "noisy" in t:
        t = t[t["noisy"] != "true"]
    if t.empty:
        raise BadInput(f"no measured runs match {fs or 'the experiment'} in {a.experiment} at {uri}: "
                       f"fix the filters (nnbench {a.command} --help)")
    return t, uri, fs

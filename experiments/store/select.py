"""The selection syntax every command shares: `key=value` pairs (params by name, anything else a tag; `key=a,b`
either value), `--filter` (a raw MLflow filter) and `--sweep` (one sweep's points), as one MLflow filter string; and
the runs a `Selection` selects in a store, or one line naming the fix where it selects none (a key no run has gets a
did-you-mean from the runs' params and tags; a selection that matches nothing says what there is). Parent side."""
from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Callable

from experiments.common.columns import PARAMS
from experiments.common.errors import BadInput, first_line
from experiments.store.uris import failure, readable

# Columns of the selected rows that are no param or tag of a run (report.tables.tidy adds them per op)
ROW_KEYS = ("op", "variant", "run_date")
HIDDEN = ("run_id", "run_name", "start_time")  # columns no selection names


def pairs_of(pairs: list[str]) -> dict[str, list[str]]:
    """key=value pairs as {key: [values]} (`key=a,b`: either value); raises ValueError naming the fix for a pair that
    is not key=value, or a key given twice."""
    out: dict[str, list[str]] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        values = [v.strip() for v in value.split(",") if v.strip()]
        if not sep or not key or not values:
            raise ValueError(f"filter {pair!r} is not key=value: use e.g. model=lenet precision=fp32 "
                             "(key=a,b for either value)")
        if key in out:
            raise ValueError(f"{key} is given twice: give it once, with its values as {key}={','.join(out[key])},"
                             f"{','.join(values)}")
        out[key] = values
    return out


def qualified(key: str) -> str:
    if key.startswith(("params.", "tags.", "metrics.", "attributes.")):
        return key
    return f"params.{key}" if key in PARAMS else f"tags.{key}"


def filter_string(pairs: dict[str, list[str]] | list[str], extra: str | None = None, sweep: str | None = None) -> str:
    """key=value pairs plus a raw MLflow filter and a sweep's parent run id, AND-ed (several values: IN)."""
    if isinstance(pairs, list):
        pairs = pairs_of(pairs)
    clauses = []
    for key, values in pairs.items():
        quoted = ", ".join(f"'{v}'" for v in values)
        clauses.append(f"{qualified(key)} = {quoted}" if len(values) == 1 else f"{qualified(key)} IN ({quoted})")
    if sweep:
        clauses.append(f"tags.mlflow.parentRunId = '{sweep}'")
    if extra:
        clauses.append(extra)
    return " and ".join(clauses)


@dataclass(frozen=True)
class Selection:
    """The runs a reading command asks for: key=value pairs, a raw MLflow filter, a sweep (a run id, or last), the
    store and experiment, whether noisy runs are left out, and the command's name for its hints."""

    pairs: tuple[str, ...] = ()
    filter: str | None = None
    sweep: str | None = None
    uri: str | None = None
    experiment: str = "nnbench"
    exclude_noisy: bool = False
    command: str = "compare"


# The store's runs as rows, one per measured run and op (report.tables.tidy: the caller hands it in, a sibling's)
Rows = Callable[[object], object]


def sweep_id(uri: str, experiment: str, given: str | None) -> str | None:
    """A sweep's run id: `last` is the newest sweep in the store; BadInput where there is none."""
    from experiments.store import tracking  # mlflow is slow to import: only once a sweep is asked for

    try:
        return tracking.Store(uri).sweep_run_id(experiment, given)
    except LookupError as e:
        raise BadInput(f"{e}: run one (nnbench run -m framework=jax,torch model=lenet), or give --sweep RUN_ID") \
            from None
    except Exception as e:
        raise BadInput(failure(uri, e, "--uri")) from None


def search(uri: str, experiment: str, fs: str, rows: Rows):
    """The runs of a filter as `rows` makes them; BadInput for a bad filter or a store that fails."""
    from experiments.store import tracking  # mlflow is slow to import: only after parsing

    try:
        return rows(tracking.Store(uri).search(experiment, fs))
    except LookupError as e:  # no such experiment
        raise BadInput(f"{e}: check --experiment and --uri") from None
    except Exception as e:
        text = str(e)
        if "filter" in text.lower() or "INVALID_PARAMETER_VALUE" in text:  # MLflow's words for a bad --filter
            raise BadInput(f"{first_line(e)}: fix --filter (e.g. --filter \"params.model = 'lenet'\")") from None
        raise BadInput(failure(uri, e, "--uri")) from None


def select(sel: Selection, rows: Rows, sweep: str | None = None):
    """The selected runs as `rows` makes them, the store's URI and the filter string; BadInput (one line naming the
    fix) for a bad pair, a store that can't be read, or nothing selected (saying what there is). The sweep's run id
    is `sweep`, else the one `sel.sweep` names (a run id, or last)."""
    uri = readable(sel.uri)
    sweep = sweep or sweep_id(uri, sel.experiment, sel.sweep)
    try:
        pairs = pairs_of(list(sel.pairs))
    except ValueError as e:
        raise BadInput(str(e)) from None
    single = {k: v for k, v in pairs.items() if len(v) == 1 and k.split(".")[-1] not in ROW_KEYS}
    t = search(uri, sel.experiment, filter_string(single, sel.filter, sweep), rows)
    for key, values in pairs.items():
        if key not in single and not t.empty:
            column = key.split(".", 1)[1] if key.startswith(("params.", "tags.")) else key
            t = t[t[column].astype(str).isin(values)] if column in t else t.iloc[:0]
    if sel.exclude_noisy and not t.empty and "noisy" in t:
        t = t[t["noisy"] != "true"]
    if t.empty:
        raise BadInput(nothing(sel, uri, pairs, search(uri, sel.experiment, filter_string({}, sel.filter, sweep),
                                                        rows), filter_string({}, sel.filter, sweep)))
    return t, uri, filter_string(pairs, sel.filter, sweep)


def nothing(sel: Selection, uri: str, pairs: dict[str, list[str]], every, base: str) -> str:
    """Why a selection matched nothing, in one line: what the runs without the pairs (`every`) hold."""
    where = f"in experiment {sel.experiment!r} at {uri}" + (f" ({base})" if base else "")
    if every.empty:
        return (f"no measured runs {where}: run a sweep (nnbench run -m framework=jax,torch model=lenet)" if not base
                else f"no measured runs {where}: fix --sweep / --filter")
    for key, values in pairs.items():
        column = key.split(".", 1)[1] if key.startswith(("params.", "tags.")) else key
        if column not in every:
            keys = [c for c in every.columns if c not in HIDDEN and every[c].notna().any()]
            near = difflib.get_close_matches(column, keys, n=3)
            return (f"no run has a param or tag {column!r}: " + (f"did you mean {' or '.join(near)}?" if near else
                    f"use one of {', '.join(sorted(keys)[:30])}"))
        have = sorted(every[column].dropna().astype(str).unique(), key=lambda v: (len(v), v))
        if not set(values) & set(have):
            near = difflib.get_close_matches(values[0], have, n=1)
            hint = f"did you mean {column}={near[0]}? " if near else ""
            return (f"{column}={','.join(values)} matches no run {where}: {hint}{column} is one of "
                    f"{', '.join(have[:20])}")
    if sel.exclude_noisy:
        return f"every run that matches is tagged noisy=true {where}: drop --exclude-noisy, or measure again"
    said = " ".join(f"{k}={','.join(v)}" for k, v in pairs.items())
    return f"no run has {said} together {where}: drop a pair (nnbench {sel.command} without it lists what there is)"

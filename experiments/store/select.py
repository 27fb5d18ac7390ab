"""The selection syntax every command shares: `key=value` pairs (params by name, anything else a tag), `--filter`
(a raw MLflow filter) and `--sweep` (one sweep's points), as one MLflow filter string. Parent side."""
from __future__ import annotations

from experiments.common.columns import PARAMS


def filter_string(pairs: list[str], extra: str | None = None, sweep: str | None = None) -> str:
    """key=value pairs plus a raw MLflow filter and a sweep's parent run id, AND-ed; raises ValueError naming the
    fix for a pair that is not key=value."""
    clauses = []
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"filter {pair!r} is not key=value: use e.g. model=lenet precision=fp32")
        if not key.startswith(("params.", "tags.", "metrics.", "attributes.")):
            key = f"params.{key}" if key in PARAMS else f"tags.{key}"
        clauses.append(f"{key} = '{value}'")
    if sweep:
        clauses.append(f"tags.mlflow.parentRunId = '{sweep}'")
    if extra:
        clauses.append(extra)
    return " and ".join(clauses)

"""The selection syntax every command shares: `key=value` pairs (params by name, anything else a tag; `key=a,b`
either value), `--filter` (a raw MLflow filter) and `--sweep` (one sweep's points), as one MLflow filter string.
Parent side."""
from __future__ import annotations

from experiments.common.columns import PARAMS


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

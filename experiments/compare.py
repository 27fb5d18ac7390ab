"""Compare stored runs: `python -m experiments.compare model=lenet precision=fp32 [--out report/]`."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

PARAMS = {"framework", "compile", "mode", "model", "precision", "batch_size", "device", "device_requested", "ops"}


def filter_string(pairs: list[str], extra: str | None, sweep: str | None) -> str:
    """key=value pairs (params by name, anything else a tag) plus a raw MLflow filter, AND-ed."""
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


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m experiments.compare", description=__doc__)
    p.add_argument("filters", nargs="*", help="key=value: a param (model, framework, precision, batch_size, ...) "
                                              "or a tag (torch_version, env_fingerprint, ...)")
    p.add_argument("--filter", help="an MLflow filter string, AND-ed with the pairs")
    p.add_argument("--sweep", help="the parent run id of a sweep: compare its points")
    p.add_argument("--baseline", default="torch-eager fp32", help="variant for speedups (default: %(default)s)")
    p.add_argument("--out", type=Path, help="write report.md, report.html, summary.csv and the PNGs here")
    p.add_argument("--uri", help="tracking URI (default: $MLFLOW_TRACKING_URI, else sqlite:///mlruns/mlflow.db)")
    p.add_argument("--experiment", default="nnbench")
    a = p.parse_args(argv)

    from experiments import report, tracking

    uri = tracking.store_uri(a.uri)
    try:
        fs = filter_string(a.filters, a.filter, a.sweep)
        runs = tracking.search(uri, a.experiment, fs)
    except Exception as e:  # a bad filter or an unreachable store: one line, no traceback
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        print(f"nnbench compare: error: {first}", file=sys.stderr)
        return 2
    t = report.tidy(runs)
    if t.empty:
        print(f"nnbench compare: error: no measured runs match {fs or 'the experiment'} in {a.experiment} at {uri}: "
              "check the filters (python -m experiments.compare --help)", file=sys.stderr)
        return 2
    print(report.markdown(report.summary(t, a.baseline)))
    if a.out:
        report.write(t, a.out, a.baseline, title=f"nnbench: {fs or a.experiment}")
        print(f"\nreport: {a.out / 'report.md'}, {a.out / 'report.html'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

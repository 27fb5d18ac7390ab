"""Compare stored runs: `python -m experiments.compare model=lenet precision=fp32 [--out report/]`.

With `--by jax_version` (any tag or param, or run_date) it judges each change of that value per point:
ratio of medians with a bootstrap CI, a Mann-Whitney U p-value and a verdict.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

PARAMS = {"framework", "compile", "mode", "model", "precision", "batch_size", "device", "device_requested", "ops",
          "param_count", "repeat"}


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
    p.add_argument("--by", help="judge changes across this tag or param: jax_version, torch_version, "
                                "nnbench_git_commit, env_fingerprint, run_date, ...")
    p.add_argument("--threshold", type=float, default=0.05, help="smallest change that counts (default 5%%)")
    p.add_argument("--alpha", type=float, default=0.05, help="significance level (default %(default)s)")
    p.add_argument("--fail-on-regression", action="store_true", help="exit 1 if any point is significantly slower")
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
    if a.by:
        return by_version(a, t, uri, fs)
    print(report.markdown(report.summary(t, a.baseline)))
    if a.out:
        report.write(t, a.out, a.baseline, title=f"nnbench: {fs or a.experiment}")
        print(f"\nreport: {a.out / 'report.md'}, {a.out / 'report.html'}")
    return 0


def by_version(a: argparse.Namespace, t, uri: str, fs: str) -> int:
    from functools import cache

    from experiments import report, tracking

    if a.by not in t.columns:
        known = sorted(c for c in t.columns if c.endswith(("_version", "_commit", "fingerprint", "_date")))
        print(f"nnbench compare: error: no tag or param {a.by!r} in the selected runs: use one of "
              f"{', '.join(known)}", file=sys.stderr)
        return 2
    samples = cache(lambda run_id: tracking.load_samples(uri, run_id))
    c = report.changes(t, a.by, lambda run_id, op: samples(run_id)[op]["samples_s"], a.threshold, a.alpha)
    if c.empty:
        print(f"nnbench compare: error: no point was measured with two values of {a.by} "
              f"(values: {', '.join(sorted(t[a.by].dropna().astype(str).unique())) or 'none'})", file=sys.stderr)
        return 2
    print(report.changes_markdown(c))
    if ((c["runs_old"] == 1) | (c["runs_new"] == 1)).any():
        print("\nnote: a side measured in a single process cannot show process-to-process drift, which can exceed "
              "the change; measure replicates interleaved, e.g. -m repeat=0,1,2,3,4 runtime.python=A,B (see README)")
    counts = c["verdict"].value_counts()
    print(f"\n{len(c)} changes: " + ", ".join(f"{n} {v}" for v, n in counts.items())
          + f" (threshold {a.threshold:.0%}, alpha {a.alpha})")
    if a.out:
        report.write_changes(t, c, a.by, a.out, title=f"nnbench: changes across {a.by} ({fs or a.experiment})")
        print(f"report: {a.out / 'report.md'}, {a.out / 'report.html'}")
    return 1 if a.fail_on_regression and counts.get("slower", 0) else 0


if __name__ == "__main__":
    sys.exit(main())

"""Compare stored runs: `python -m experiments.compare model=lenet precision=fp32 [--out report/]`.

With `--by jax_version` (any tag or param, or run_date) it judges each change of that value per point:
ratio of medians with a bootstrap CI, a Mann-Whitney U p-value and a verdict.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from experiments.config import DEFAULT_BASELINE
from experiments.records import PARAMS


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


def add_selection(p: argparse.ArgumentParser) -> None:
    """The run selection of compare and export: key=value pairs, --filter, --sweep, --uri, --experiment."""
    p.add_argument("filters", nargs="*", help="key=value: a param (model, framework, mode, precision, batch_size, "
                                              "device, ...) or a tag (torch_version, env_fingerprint, ...)")
    p.add_argument("--filter", help="an MLflow filter string, AND-ed with the pairs")
    p.add_argument("--sweep", help="the parent run id of a sweep: its points only")
    p.add_argument("--uri", help="tracking URI (default: $MLFLOW_TRACKING_URI, else sqlite:///mlruns/mlflow.db)")
    p.add_argument("--experiment", default="nnbench")
    p.add_argument("--exclude-noisy", action="store_true",
                   help="leave out runs tagged noisy=true (other processes used the CPU while they were measured)")


def select(a: argparse.Namespace, prog: str):
    """The selected runs as `report.tidy` rows, the store's URI and the filter string; raises with one line.

    `prog`: the command to name in the message (experiments.compare or experiments.export)."""
    from experiments import report, tracking  # after parsing: mlflow is slow to import

    uri = tracking.store_uri(a.uri)
    fs = filter_string(a.filters, a.filter, a.sweep)
    t = report.tidy(tracking.search(uri, a.experiment, fs))
    if a.exclude_noisy and not t.empty and "noisy" in t:
        t = t[t["noisy"] != "true"]
    if t.empty:
        raise LookupError(f"no measured runs match {fs or 'the experiment'} in {a.experiment} at {uri}: "
                     f"check the filters (python -m {prog} --help)")
    return t, uri, fs


def fail(prog: str, e: Exception | str) -> int:
    """One line on stderr (a bad filter, an unreachable store, nothing selected), exit status 2."""
    first = (str(e).strip().splitlines() or [type(e).__name__])[0]
    print(f"nnbench {prog}: error: {first}", file=sys.stderr)
    return 2


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m experiments.compare", description=__doc__)
    add_selection(p)
    p.add_argument("--baseline", default=DEFAULT_BASELINE, help="variant for speedups (default: %(default)s)")
    p.add_argument("--out", type=Path, help="write report.md, report.html, summary.csv and the PNGs here")
    p.add_argument("--by", help="judge changes across this tag or param: jax_version, torch_version, "
                                "nnbench_git_commit, env_fingerprint, run_date, ...")
    p.add_argument("--threshold", type=float, default=0.05, help="smallest change that counts (default 5%%)")
    p.add_argument("--alpha", type=float, default=0.05, help="significance level (default %(default)s)")
    p.add_argument("--fail-on-regression", action="store_true", help="exit 1 if any point is significantly slower")
    a = p.parse_args(argv)
    try:
        t, uri, fs = select(a, "experiments.compare")
    except Exception as e:
        return fail("compare", e)
    if a.by:
        return by_version(a, t, uri, fs)
    from experiments import report

    print(report.markdown(report.summary(t, a.baseline)))
    if a.out:
        report.write(t, a.out, a.baseline, title=f"nnbench: {fs or a.experiment}")
        print(f"\nreport: {a.out / 'report.md'}, {a.out / 'report.html'}")
    return 0


def process_samples(entry: dict) -> list[list[float]]:
    """An op's samples.json entry as one list of samples per measuring process (older runs: one process)."""
    return [p["samples_s"] for p in entry["processes"]] if "processes" in entry else [entry["samples_s"]]


def by_version(a: argparse.Namespace, t, uri: str, fs: str) -> int:
    from functools import cache

    from experiments import changes, tracking

    if a.by not in t.columns:
        known = sorted(c for c in t.columns if c.endswith(("_version", "_commit", "fingerprint", "_date")))
        return fail("compare", f"no tag or param {a.by!r} in the selected runs: use one of {', '.join(known)}")
    samples = cache(lambda run_id: tracking.load_samples(uri, run_id))
    c = changes.changes(t, a.by, lambda run_id, op: process_samples(samples(run_id)[op]), a.threshold, a.alpha)
    if c.empty:
        values = ", ".join(sorted(t[a.by].dropna().astype(str).unique())) or "none"
        return fail("compare", f"no point was measured with two values of {a.by} (values: {values})")
    print(changes.changes_markdown(c))
    if ((c["processes_old"] == 1) | (c["processes_new"] == 1)).any():
        print("\nnote: a side measured in a single process cannot show process-to-process drift, which can exceed "
              "the change; measure replicates interleaved, e.g. -m repeat=0,1,2,3,4 runtime.python=A,B (see README)")
    counts = c["verdict"].value_counts()
    print(f"\n{len(c)} changes: " + ", ".join(f"{n} {v}" for v, n in counts.items())
          + f" (threshold {a.threshold:.0%}, alpha {a.alpha})")
    if a.out:
        changes.write_changes(t, c, a.by, a.out, title=f"nnbench: changes across {a.by} ({fs or a.experiment})")
        print(f"report: {a.out / 'report.md'}, {a.out / 'report.html'}")
    return 1 if a.fail_on_regression and counts.get("slower", 0) else 0


if __name__ == "__main__":
    sys.exit(main())

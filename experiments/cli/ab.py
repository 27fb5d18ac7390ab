"""Compare values of one axis, paired: `nnbench ab AXIS=A,B [OVERRIDES]`, e.g.
`nnbench ab framework.compile=true,false framework=torch model=lenet` or `nnbench ab runtime.python=ENV_A,ENV_B`.

It is the paired sweep `python -m experiments.run -m AXIS=A,B OVERRIDES report.along=AXIS`: on every cell (a point's
op) warm workers of each value take turns in short bursts, the idle ones stopped, in fresh trials, and each value is
judged against the one before it. Then it prints per cell the ratio B/A (above 1: B is slower), its 95% interval,
the verdict and the pairs measured (an unsettled cell gets more, up to --max-pairs). The sweep logs its points and
its answer as any sweep does (one parent run, one run per point, every burst kept). --json prints the verdicts as
one JSON object (schema nnbench.paired/1, docs/comparing.md); --fail-on-regression exits 1 naming the cells where B
is slower; --issue DIR writes, for each cell judged slower, an upstream report draft with a standalone script
(docs/comparing.md); --profile profiles both sides of each cell judged slower or faster and says where the time went,
per category and top op. The flags override the bench preset's design; bench=quick gives one pair, no verdict.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from experiments.cli.selection import add_design, add_issue, add_uri, design_flags
from experiments.common.errors import LOST, OK
from experiments.common.options import writable
from experiments.stats.verdicts import PAIRED_THRESHOLD


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("axis", metavar="AXIS=A,B", help="the values to compare, as a sweep override: "
                                                    "framework.compile=true,false, runtime.python=ENV_A,ENV_B")
    p.add_argument("overrides", nargs="*", help="the rest of the points' config, as for python -m experiments.run")
    add_design(p)
    p.add_argument("--out", type=Path, help="the sweep's dir (default: a new temporary directory)")
    p.add_argument("--json", action="store_true", help="print the verdicts as one JSON object; the sweep's own "
                                                       "lines go to stderr")
    p.add_argument("--markdown", type=writable("--markdown", directory=False), metavar="FILE",
                   help="also write a short Markdown report of the cells that changed (for a CI job summary or a PR "
                        "comment: e.g. $GITHUB_STEP_SUMMARY)")
    add_issue(p)
    add_uri(p)
    p.add_argument("--experiment", default="nnbench", help="MLflow experiment (default %(default)s)")


def run(a: argparse.Namespace) -> int:
    from experiments.compare import paired  # the sweep's door and its records: only once the arguments parse
    from experiments.store.uris import store_uri

    key, _ = paired.axis(a.axis)
    design = paired.Design(**design_flags(a))
    uri = store_uri(a.uri)
    overrides = [a.axis, *a.overrides, f"report.along={key}", *design.overrides()]
    paired.check([*overrides, f"mlflow.tracking_uri={uri}", f"mlflow.experiment_name={a.experiment}"], key, design)
    out = a.out or Path(tempfile.mkdtemp(prefix="nnbench-ab-")) / "sweep"
    code = paired.sweep(overrides, out, uri, a.experiment, quiet=a.json)
    if code in paired.STOPPED:  # the sweep said so in its one line
        return code
    rows = paired.verdicts(out)
    print(paired.as_json(rows, command="ab", axis=key, sweep_dir=str(out), exit=code) if a.json else
          "\n" + paired.table(rows))
    if a.markdown:
        threshold = a.threshold if a.threshold is not None else PAIRED_THRESHOLD
        with open(a.markdown, "a") as f:  # a CI job summary collects several reports
            f.write(paired.markdown(rows, f"nnbench ab {a.axis} {' '.join(a.overrides)}", threshold))
    if a.issue:
        from experiments.compare import upstream  # the exports and the script: only when asked

        upstream.written(upstream.drafts(rows, out, a.issue, f"nnbench ab {a.axis} {' '.join(a.overrides)}"), a.issue)
    if code != OK:
        return code
    if a.fail_on_regression and (slow := paired.slower(rows)):
        print(f"nnbench ab: error: slower: {'; '.join(slow)}", file=sys.stderr)
        return LOST
    return OK

"""Log results kept on disk to a store: `python -m experiments.upload multirun/2026-11-29/14-31-13 [--uri URI]`.

Every point is saved in its Hydra job directory before it is logged; points whose logging failed (a
store that was down) have no `mlflow_run_id` file yet, and this logs them, under their sweep's parent run
when it is the same store. Running it twice logs nothing twice.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

MARKER = "mlflow_run_id"


def pending(root: Path) -> list[Path]:
    from experiments.records import META

    return sorted(p.parent for p in root.glob(f"**/points/*/{META}") if not (p.parent / MARKER).exists())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m experiments.upload", description=__doc__)
    p.add_argument("directory", type=Path, help="a sweep or job directory (or any folder above them)")
    p.add_argument("--uri", help="tracking URI (default: $MLFLOW_TRACKING_URI, else sqlite:///mlruns/mlflow.db)")
    p.add_argument("--experiment", default="nnbench")
    a = p.parse_args(argv)

    from experiments import records, tracking
    from experiments.sweep import Sweep

    todo = pending(a.directory)
    if not todo:
        print(f"nothing to log under {a.directory}")
        return 0
    uri = tracking.store_uri(a.uri)
    try:
        exp_id = tracking.open_store(uri, a.experiment)
    except tracking.StoreUnavailable as e:
        print(f"nnbench upload: error: {e}", file=sys.stderr)
        return 2
    for directory in todo:
        rec = records.Record.load(directory)
        sweep = Sweep.above(directory)
        state = sweep.read() if sweep else None
        parent = state.parent_run_id if state and state.uri == uri else None
        run_id = tracking.log_record(uri, exp_id, rec, directory, parent)
        (directory / MARKER).write_text(run_id)
        print(f"{directory} -> run {run_id}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

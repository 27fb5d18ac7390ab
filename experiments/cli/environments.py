"""What `nnbench versions` and `bisect` share: where measuring environments come from (index, installer, cache),
paired or unpaired, the sweep's overrides validated before anything is built, and the sweep they run across the
environments."""
from __future__ import annotations

import argparse
import contextlib
import os
import sys
from pathlib import Path

from experiments.cli.selection import add_uri
from experiments.common.config import ROOT
from experiments.common.child import run_to_end
from experiments.common.errors import BadInput
from experiments.common.options import positive

# Keys of a sweep that `nnbench versions` and `bisect` set themselves, and what to use instead.
SET_BY_COMMAND = {"runtime.python": "it runs one environment per version", "repeat": "use --repeats",
                  "mlflow.tracking_uri": "use --uri", "mlflow.experiment_name": "use --experiment",
                  "mlflow.parent_run_id": "its own parent run holds the sweep"}


def add_environments(p: argparse.ArgumentParser) -> None:
    """Where the measuring environments come from: the index, the installer, the cache; and the store."""
    p.add_argument("--index-url", help="the package index (default: pip's, else PyPI); a file:// index works")
    p.add_argument("--extra-index-url", action="append", default=[], metavar="URL",
                   help="another index, e.g. one that serves nightlies (repeatable)")
    p.add_argument("--find-links", action="append", default=[], metavar="DIR_OR_URL",
                   help="also look for packages here (repeatable)")
    p.add_argument("--installer", choices=("uv", "pip"), help="default: uv when installed, else pip")
    p.add_argument("--cache", type=Path, help="the environments' cache (default: $NNBENCH_ENV_CACHE, else "
                                              "~/.cache/nnbench/envs)")
    p.add_argument("--repeats", type=positive("--repeats", "3", int), default=1,
                   help="rounds of the unpaired sweep (--unpaired), interleaved (repeat=0..N-1; default "
                        "%(default)s)")
    add_uri(p)
    p.add_argument("--experiment", default="nnbench", help="MLflow experiment (default %(default)s)")
    p.add_argument("--json", action="store_true", help="print the answer as one JSON object on stdout; the "
                                                       "progress and the sweep's own lines go to stderr")


def add_pairing(p: argparse.ArgumentParser, unpaired: str) -> None:
    """--unpaired (what the command does then), and --paired, the default, accepted as a no-op."""
    group = p.add_mutually_exclusive_group()
    group.add_argument("--unpaired", action="store_true", help=unpaired)
    group.add_argument("--paired", action="store_true",
                       help="compare paired, nnbench ab's engine (the default: accepted, changes nothing)")


def answering(a: argparse.Namespace, work) -> int:
    """`work()`'s exit code; with --json everything it prints goes to stderr, then `a.answer` as JSON to stdout."""
    if not a.json:
        return work()
    import json  # only for --json

    a.answer = {}
    with contextlib.redirect_stdout(sys.stderr):
        code = work()
    print(json.dumps(a.answer, indent=1, default=str))
    return code


def build_options(a: argparse.Namespace):
    """(index, installer, cache) from the options; BadInput naming the fix."""
    from experiments.harness import envs  # packaging and the installers: only for the commands that build

    try:
        index = envs.Index(a.index_url, tuple(a.find_links), tuple(a.extra_index_url))
        return index, envs.installer(a.installer), a.cache or envs.cache_root()
    except ValueError as e:
        raise BadInput(str(e)) from None


def sweep_jobs(a: argparse.Namespace, uri: str, environments=None):
    """The sweep's jobs, composed and validated (the overrides, the store, this interpreter's probe) before anything
    is built; BadInput naming the fix. A `model=` this interpreter doesn't know may be a network that only the
    environments compared declare (`nnbench versions mypkg==1.0,1.1 model=mynet`): then `environments()` builds them
    and the overrides are checked again with their networks."""
    from experiments.common.config import register  # Hydra is slow to import: only for the commands that sweep
    from experiments.sweep import commandline

    if a.repeats < 1:
        raise BadInput(f"--repeats must be at least 1 (got {a.repeats})")
    for o in a.overrides:
        key = o.lstrip("+~").split("=", 1)[0]
        if key in SET_BY_COMMAND:
            raise BadInput(f"{key} is set by nnbench {a.command}: {SET_BY_COMMAND[key]}")
    argv = ["-m", *a.overrides, f"mlflow.tracking_uri={uri}", f"mlflow.experiment_name={a.experiment}"]
    register()
    try:
        validated = commandline.explained(argv)
    except BadInput:
        if environments is None or not any(o.lstrip("+").startswith("model=") for o in a.overrides):
            raise
        register([str(e.python) for e in environments()])
        validated = commandline.explained(argv)
    if validated is None or validated.jobs is None:
        raise BadInput(f"nnbench {a.command} runs the basic sweeper's jobs: drop hydra/sweeper and the print flags")
    return validated.jobs


def unpaired(a: argparse.Namespace) -> None:
    """The command runs the unpaired sweep (--unpaired, or one environment): its overrides say bench.paired=false,
    unless they set it, so that each environment's points are measured by processes of their own, one after another,
    as its verdicts (Welch's t on process medians) assume, and the door's jobs are the ones measured (bisect looks
    their points up in the store by their config)."""
    if not any(o.lstrip("+~").startswith("bench.paired=") for o in a.overrides):
        a.overrides = [*a.overrides, "bench.paired=false"]


def sweep(a: argparse.Namespace, uri: str, pythons: list[Path], parent: str) -> int:
    """The sweep across these interpreters, interleaved (runtime.python varies fastest), under `parent`; its exit code.
    Its output goes to this terminal. It is the unpaired sweep (--unpaired): the paired one would measure the
    environments as one cell's variants (an override may still ask for that)."""
    quoted = ",".join(f"'{p}'" for p in pythons)
    rounds = [f"repeat={','.join(map(str, range(a.repeats)))}"] if a.repeats > 1 else []
    argv = [sys.executable, "-m", "experiments.run", "-m", "bench.paired=false", *a.overrides, *rounds,
            f"runtime.python={quoted}",
            f"mlflow.tracking_uri={uri}", f"mlflow.experiment_name={a.experiment}", f"mlflow.parent_run_id={parent}"]
    environ = os.environ | {"PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    return run_to_end(argv, env=environ, stdout=sys.stderr if getattr(a, "json", False) else None).returncode

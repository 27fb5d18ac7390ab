"""The options commands share, read the same way by every command that takes them: the run selection of the reading
commands (`key=value`, `--filter`, `--sweep`, `--uri`, `--experiment`, `--exclude-noisy`), the store option, the
paired design (`ab`, `versions`, `bisect`), and where the measuring environments come from and --json's answer
(`versions`, `bisect`). The runs a selection selects are found in the store (`store.select`)."""
from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path
from typing import Callable

from experiments.common.options import positive, probability, threshold, writable
from experiments.store import select as store_select
from experiments.store.select import Selection
from experiments.store.uris import DEFAULT_URI


def add_uri(p: argparse.ArgumentParser, default: str | None = None) -> None:
    p.add_argument("--uri", help=default or f"tracking URI (default: $MLFLOW_TRACKING_URI, else {DEFAULT_URI})")


def add_design(p: argparse.ArgumentParser, verdict: bool = True) -> None:
    """The paired design's flags (`ab`, `versions`, `bisect`; default: the bench preset's), each a sweep's key, and
    (`verdict`) the verdict's threshold and alpha and the gate on it."""
    p.add_argument("--pairs", type=positive("--pairs", "6", int), help="fresh pairs per cell at first "
                                                                        "(bench.processes)")
    p.add_argument("--max-pairs", type=positive("--max-pairs", "12", int),
                   help="an unsettled cell gets more pairs, up to this many (bench.max_processes)")
    p.add_argument("--bursts", type=positive("--bursts", "25", int),
                   help="bursts per side per pair and cell (bench.rounds)")
    p.add_argument("--burst-ms", type=positive("--burst-ms", "20"), help="burst length, ms (bench.burst_s)")
    p.add_argument("--profile", action=argparse.BooleanOptionalAction, help="then profile both sides of each cell "
                   "judged slower or faster and say where the time went (report.profile_changed)")
    if not verdict:
        return
    p.add_argument("--threshold", type=threshold, help="no change within 1 ± this: 0.03 or 3%% (report.threshold, "
                                                       "default 3%%)")
    p.add_argument("--alpha", type=probability("--alpha"), help="each verdict's significance level, "
                                                                "Benjamini-Hochberg across the cells (report.alpha)")
    p.add_argument("--fail-on-regression", action="store_true",
                   help="exit 1, naming the cells, where a value is slower than the one before it")


def add_issue(p: argparse.ArgumentParser) -> None:
    p.add_argument("--issue", type=writable("--issue", directory=True), metavar="DIR",
                   help="paired: for each cell judged slower, a folder here with a Markdown draft for the framework's "
                        "tracker and a standalone script that times the two sides' exported steps with the framework "
                        "alone (docs/comparing.md)")


DESIGN_FLAGS = ("pairs", "max_pairs", "bursts", "burst_ms")  # what `add_design` adds besides the verdict's


def design_given(a: argparse.Namespace) -> list[str]:
    """The paired design's flags set on the command line, as `--max-pairs`."""
    return [f"--{k.replace('_', '-')}" for k in DESIGN_FLAGS if getattr(a, k, None) is not None]


def design_flags(a: argparse.Namespace) -> dict:
    """The paired design's flags as the fields of compare.paired.Design (None: the bench preset's)."""
    return {k: getattr(a, k) for k in DESIGN_FLAGS} | {"threshold": a.threshold, "alpha": a.alpha,
                                                       "profile": a.profile}


def add_environments(p: argparse.ArgumentParser) -> None:
    """Where the measuring environments come from (`versions`, `bisect`): the index, the installer, the cache; the
    unpaired sweep's rounds; the store; --json."""
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


def answering(as_json: bool, work: Callable[[], tuple[int, dict]]) -> int:
    """The exit code of `work()` (which returns it and its answer); with --json (`as_json`) everything it prints goes
    to stderr, then its answer as JSON to stdout."""
    if not as_json:
        return work()[0]
    import json  # only for --json

    with contextlib.redirect_stdout(sys.stderr):
        code, answer = work()
    print(json.dumps(answer, indent=1, default=str))
    return code


def add_sweep(p: argparse.ArgumentParser, **kw) -> None:
    p.add_argument("--sweep", metavar="RUN_ID|last", **({"help": "a sweep's parent run id, or last (the newest "
                                                         "sweep in the store): its points only"} | kw))


def add_selection(p: argparse.ArgumentParser, sweep: dict | None = None) -> None:
    """The run selection: key=value pairs, --filter, --sweep, --uri, --experiment, --exclude-noisy."""
    p.add_argument("filters", nargs="*", metavar="key=value",
                   help="a param (model, framework, mode, precision, batch_size, device, ...), a tag "
                        "(torch_version, env_fingerprint, ...) or op; key=a,b selects either value")
    p.add_argument("--filter", help="an MLflow filter string, AND-ed with the pairs")
    add_sweep(p, **(sweep or {}))
    add_uri(p)
    p.add_argument("--experiment", default="nnbench", help="MLflow experiment (default %(default)s)")
    p.add_argument("--exclude-noisy", action="store_true",
                   help="leave out runs tagged noisy=true (other processes used the CPU while they were measured)")


def selection(a: argparse.Namespace, given: str | None = None) -> Selection:
    """The run selection the command line gives (`given`: the sweep, where --sweep is given more than once)."""
    return Selection(tuple(a.filters), a.filter, given or a.sweep, a.uri, a.experiment, a.exclude_noisy, a.command)


def select(a: argparse.Namespace, sweep: str | None = None, given: str | None = None):
    """The selected runs as `report.tables.tidy` rows, the store's URI and the filter string (`store.select.select`);
    the sweep's run id is `sweep`, else the one `given` names (a run id, or last), else --sweep's."""
    from experiments.report import tables  # pandas and mlflow are slow to import: only after parsing

    return store_select.select(selection(a, given), tables.tidy, sweep)

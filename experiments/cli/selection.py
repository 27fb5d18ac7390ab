"""The options commands share, read the same way by every command that takes them: the run selection of the reading
commands (`key=value`, `--filter`, `--sweep`, `--uri`, `--experiment`, `--exclude-noisy`), the store option, the
paired design (`ab`, `versions`, `bisect`), and where the measuring environments come from and --json's answer
(`versions`, `bisect`).

`key=a,b` selects either value; a key no run has gets a did-you-mean from the runs' params and tags, and a
selection that matches nothing says what there is."""
from __future__ import annotations

import argparse
import contextlib
import difflib
import sys
from pathlib import Path
from typing import Callable

from experiments.common.errors import BadInput, first_line
from experiments.common.options import positive, probability, threshold, writable
from experiments.store.select import filter_string, pairs_of
from experiments.store.uris import DEFAULT_URI, failure, readable

# Columns of the selected rows that are no param or tag of a run (report.tables.tidy adds them per op)
ROW_KEYS = ("op", "variant", "run_date")
HIDDEN = ("run_id", "run_name", "start_time")  # columns no selection names


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


def sweep_id(uri: str, experiment: str, given: str | None) -> str | None:
    """--sweep's run id: `last` is the newest sweep in the store; BadInput where there is none."""
    from experiments.store import tracking  # mlflow is slow to import: only once a sweep is asked for

    try:
        return tracking.Store(uri).sweep_run_id(experiment, given)
    except LookupError as e:
        raise BadInput(f"{e}: run one (nnbench run -m framework=jax,torch model=lenet), or give --sweep RUN_ID") \
            from None
    except Exception as e:
        raise BadInput(failure(uri, e, "--uri")) from None


def search(uri: str, experiment: str, fs: str):
    """The runs of a filter as report.tables.tidy rows; BadInput for a bad filter or a store that fails."""
    from experiments.report import tables  # pandas and mlflow are slow to import: only after parsing
    from experiments.store import tracking

    try:
        return tables.tidy(tracking.Store(uri).search(experiment, fs))
    except LookupError as e:  # no such experiment
        raise BadInput(f"{e}: check --experiment and --uri") from None
    except Exception as e:
        text = str(e)
        if "filter" in text.lower() or "INVALID_PARAMETER_VALUE" in text:  # MLflow's words for a bad --filter
            raise BadInput(f"{first_line(e)}: fix --filter (e.g. --filter \"params.model = 'lenet'\")") from None
        raise BadInput(failure(uri, e, "--uri")) from None


def select(a: argparse.Namespace, sweep: str | None = None, given: str | None = None):
    """The selected runs as `report.tables.tidy` rows, the store's URI and the filter string; BadInput (one line
    naming the fix) for a bad pair, a store that can't be read, or nothing selected (saying what there is). The
    sweep's run id is `sweep`, else the one `given` names (a run id, or last), else --sweep's."""
    uri = readable(a.uri)
    sweep = sweep or sweep_id(uri, a.experiment, given or a.sweep)
    try:
        pairs = pairs_of(a.filters)
    except ValueError as e:
        raise BadInput(str(e)) from None
    single = {k: v for k, v in pairs.items() if len(v) == 1 and k.split(".")[-1] not in ROW_KEYS}
    fs = filter_string(single, a.filter, sweep)
    t = search(uri, a.experiment, fs)
    for key, values in pairs.items():
        if key not in single and not t.empty:
            column = key.split(".", 1)[1] if key.startswith(("params.", "tags.")) else key
            t = t[t[column].astype(str).isin(values)] if column in t else t.iloc[:0]
    if a.exclude_noisy and not t.empty and "noisy" in t:
        t = t[t["noisy"] != "true"]
    if t.empty:
        raise BadInput(nothing(a, uri, pairs, filter_string({}, a.filter, sweep)))
    return t, uri, filter_string(pairs, a.filter, sweep)


def nothing(a: argparse.Namespace, uri: str, pairs: dict[str, list[str]], base: str) -> str:
    """Why a selection matched nothing, in one line: what the runs without the pairs hold."""
    every = search(uri, a.experiment, base)
    where = f"in experiment {a.experiment!r} at {uri}" + (f" ({base})" if base else "")
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
    if a.exclude_noisy:
        return f"every run that matches is tagged noisy=true {where}: drop --exclude-noisy, or measure again"
    said = " ".join(f"{k}={','.join(v)}" for k, v in pairs.items())
    return f"no run has {said} together {where}: drop a pair (nnbench {a.command} without it lists what there is)"

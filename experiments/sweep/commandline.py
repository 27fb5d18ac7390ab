"""The command line, validated before anything runs: every job composed by Hydra's own loader, then the preflight.

`python -m experiments.run` calls `validate(sys.argv[1:])` before `hydra.main`, so a bad input stops with one line
(`nnbench: error: ...`, exit 2) before Hydra creates an output dir and before the store or any worker is touched.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra._internal.hydra import Hydra
from hydra._internal.utils import create_automatic_config_search_path, get_args_parser
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.types import RunMode
from omegaconf import DictConfig

from experiments.common.errors import BadInput, fail
from experiments.common.job import Job
from experiments.store import uris
from experiments.store.sweepdir import STATE
from experiments.sweep import hydra_errors, preflight

RUN_PY = Path(__file__).resolve().parents[1] / "run.py"  # the entry point: Hydra's config path is relative to it
BASIC_SWEEPER = "hydra._internal.core_plugins.basic_sweeper.BasicSweeper"
ONLY_PRINTS = ("help", "hydra_help", "cfg", "info", "shell_completion")  # Hydra prints and exits: nothing runs


@dataclass(frozen=True)
class Validated:
    """What the preflight found: the jobs (None: a sweeper that can't list them in advance) and their store."""

    jobs: list[Job] | None
    uri: str


VALIDATED: Validated | None = None  # set by the entry point; the sweep callback and a single run use it


def pythons(argv: list[str]) -> list[str]:
    """The interpreters a command line's runtime.python names (one value or a sweep of them); [] where it names none
    or doesn't parse (the door then says why)."""
    found = []
    for arg in (a for a in argv if a.lstrip("+").startswith("runtime.python=")):
        try:
            (o,) = OverridesParser.create().parse_overrides([arg])
            found += [getattr(v, "text", v) for v in getattr(o.value(), "list", None) or [o.value()]]  # unquoted
        except Exception:  # Hydra's own parse errors: the door reports them
            continue
    return [str(p) for p in found if p not in (None, "null")]


def validate(argv: list[str]) -> Validated | None:
    """Every job of the command line, validated; exits with one line naming the fix on bad input."""
    try:
        return explained(argv)
    except BadInput as e:
        fail(str(e))


def explained(argv: list[str], first: Callable[[list[Job]], None] = lambda jobs: None) -> Validated | None:
    """`validated`, with Hydra's and OmegaConf's own errors as BadInput naming the fix (`nnbench versions` and
    `bisect` validate their sweep's overrides with it before building anything; `first`: their own checks of the
    jobs, before the probes)."""
    try:
        return validated(argv, first)
    except BadInput:
        raise
    except Exception as e:  # Hydra's and OmegaConf's own errors, and anything else found before running
        raise BadInput(hydra_errors.explain(e)) from None


def validated(argv: list[str], first: Callable[[list[Job]], None] = lambda jobs: None) -> Validated | None:
    parser = get_args_parser()
    parser.error = refuse  # argparse would print its usage, then the error
    args = parser.parse_args(argv)
    if args.run + args.multirun + bool(args.cfg) + args.shell_completion + bool(args.info) > 1:
        raise BadInput("give one of --run, --multirun (-m), --cfg, --info and --shell-completion")
    if args.resolve and not (args.cfg or args.help):
        raise BadInput("--resolve goes with --cfg or --help")
    if any(getattr(args, a) for a in ONLY_PRINTS):
        return None
    search = create_automatic_config_search_path(str(RUN_PY), None, args.config_path or "conf")
    if args.config_dir:
        search.prepend("command-line", f"file://{Path(args.config_dir).resolve()}")
    hydra = Hydra.create_main_hydra2(task_name="run", config_search_path=search)
    try:
        name = args.config_name or "config"
        multirun = args.multirun or hydra.get_mode(config_name=name, overrides=list(args.overrides)) == RunMode.MULTIRUN
        master = hydra.compose_config(name, list(args.overrides), RunMode.MULTIRUN if multirun else RunMode.RUN)
        listed = master.hydra.sweeper._target_ == BASIC_SWEEPER or not multirun  # else: its jobs come later
        cfgs = job_configs(master) if multirun and listed else [master]
        out_dir = Path(str(master.hydra.sweep.dir if multirun else master.hydra.run.dir))
    finally:
        GlobalHydra.instance().clear()
    if (out_dir / STATE).exists():
        raise BadInput(f"{out_dir} already holds another sweep ({STATE}): choose another hydra.sweep.dir")
    configs = [preflight.typed(c) for c in cfgs]
    if len({(c.mlflow.tracking_uri, c.mlflow.experiment_name) for c in configs}) > 1:
        raise BadInput("a sweep logs to one store: sweep mlflow.* in separate sweeps")
    uri = uris.validate(configs[0].mlflow.tracking_uri, configs[0].mlflow.experiment_name)
    jobs = preflight.jobs(configs, first)
    return Validated(jobs if listed else None, uri)


def refuse(message: str) -> NoReturn:
    raise BadInput(f"{message} (see python -m experiments.run --help)")


def job_configs(master: DictConfig) -> list[DictConfig]:
    """Compose every job of a basic-sweeper multirun, as the sweeper itself will (presets add sweeper params)."""
    loader = GlobalHydra.instance().config_loader()
    params = [f"{k}={v}" for k, v in (master.hydra.sweeper.get("params") or {}).items()]
    overrides = OverridesParser.create(config_loader=loader).parse_overrides(
        params + list(master.hydra.overrides.task))
    jobs = [j for batch in BasicSweeper.split_arguments(overrides, None) for j in batch]
    return [loader.load_sweep_config(master, list(j)) for j in jobs]


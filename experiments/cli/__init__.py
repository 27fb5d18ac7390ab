"""`nnbench` (or `python -m experiments`): one command, its subcommands, one error path.

Each subcommand is one module with a docstring (its --help), `add_arguments(parser)` and `run(args) -> int`; only
the module of the command asked for is imported, so `nnbench --help` stays instant. Every error a user can fix is
one line, `nnbench <command>: error: <what>: <the fix>`, with the exit codes of `common.errors`; Ctrl-C (SIGTERM)
is one line and exit 130 (143) from every command, by `common.interrupts`' handler (a command that runs frameworks
in this process raises the signal at its own checkpoints). The sweep itself is `nnbench run -m ...`, the same
process as `python -m experiments.run -m ...` (Hydra's command line). docs/commands.md is the commands' one vocabulary.
"""
from __future__ import annotations

import argparse
import difflib
import os
import signal
import sys
from importlib.metadata import PackageNotFoundError, version
from importlib import import_module
from typing import NoReturn

from experiments.common import interrupts
from experiments.common.errors import BAD_INPUT, INTERRUPTED, LOST, BadInput, Lost, error_line, first_line

# name: (module, one line for `nnbench --help`)
COMMANDS = {
    "run": ("experiments.run", "run a sweep: the same as python -m experiments.run (Hydra's command line)"),
    "compare": ("experiments.cli.compare", "compare stored runs: table, speedups, plots"),
    "export": ("experiments.cli.export", "print a store's medians as seed 000's TIMING/METADATA lines"),
    "import": ("experiments.cli.import_", "log a file of TIMING/METADATA lines as runs"),
    "ui": ("experiments.cli.ui", "open the MLflow UI on a store and print the runs table and the latest sweep"),
    "upload": ("experiments.cli.upload", "log the points kept on disk that the store lacks, and close their sweeps"),
    "history": ("experiments.cli.history", "follow each point along a version, date or commit: its change points"),
    "versions": ("experiments.cli.versions", "measure a sweep in one cached environment per package version"),
    "bisect": ("experiments.cli.bisect", "find the release at which a point changed"),
    "ab": ("experiments.cli.ab", "compare two values of one axis, paired: interleaved bursts of warm workers"),
    "sciml": ("experiments.cli.sciml", "validate a runner's TIMING/METADATA/SAMPLES lines (stdin)"),
    "check": ("experiments.selfcheck.check", "self-check: the machine's own noise (a fixed loop's drift, load, CPU)"),
    "agree": ("experiments.selfcheck.agree", "self-check: the harness against torch's Timer and a bare loop"),
    "calibrate": ("experiments.selfcheck.calibrate", "self-check: interval coverage, false alarms and detection"),
    "overhead": ("experiments.selfcheck.overhead", "self-check: the harness's own cost, and where a sweep's time goes"),
    "devicecheck": ("experiments.selfcheck.devicecheck", "self-check: an accelerator's path end to end (a TPU or GPU)"),
    "gpucheck": ("experiments.selfcheck.gpucheck", "self-check: devicecheck --device gpu (its name before TPUs)"),
    "bursts": ("experiments.selfcheck.paired", "self-check: how long a paired comparison's bursts should be here"),
}
DESCRIPTION = "nnbench: JAX/Flax vs PyTorch benchmarks. These commands read, compare and repair what sweeps logged, " \
              "and check the harness and the machine."
EPILOG = "The sweep itself: nnbench run -m framework=jax,torch model=lenet (or python -m experiments.run -m ...; " \
         "see README.md and docs/commands.md)."


class Parser(argparse.ArgumentParser):
    """argparse with its errors as one line (argparse prints the usage first) and exit code 2."""

    def error(self, message: str) -> NoReturn:
        print(error_line(f"{message} (see {self.prog} --help)", self.prog), file=sys.stderr)
        sys.exit(BAD_INPUT)


class Formatter(argparse.RawDescriptionHelpFormatter):
    """Docstrings as written; each command's name and line on one row (argparse measures subcommands one indent
    short, and would wrap `calibrate`)."""

    def __init__(self, prog: str):
        super().__init__(prog, max_help_position=18, width=110)

    def add_argument(self, action: argparse.Action) -> None:
        super().add_argument(action)
        if isinstance(action, argparse._SubParsersAction):
            self._action_max_length = max(self._action_max_length, max(map(len, action.choices)) + 6)


def parser(chosen: str | None = None) -> tuple[Parser, Parser | None]:
    """The command line, and `chosen`'s own parser: only its module is imported, to add its arguments."""
    top = Parser(prog="nnbench", description=DESCRIPTION, epilog=EPILOG, formatter_class=Formatter)
    top.add_argument("--version", action="version", version=f"nnbench {installed()}")
    sub = top.add_subparsers(dest="command", metavar="COMMAND", required=True,
                             title="commands (nnbench COMMAND --help for each)")
    mine = None
    for name, (module, line) in COMMANDS.items():
        if name == "run":  # Hydra parses the sweep's command line: main() hands it over whole
            sub.add_parser(name, help=line, add_help=False)
            continue
        p = sub.add_parser(name, help=line, description=line, formatter_class=Formatter)
        if name == chosen:
            m = import_module(module)
            p.description = m.__doc__
            m.add_arguments(p)
            p.set_defaults(run=m.run)
            mine = p
    return top, mine


def installed() -> str:
    try:
        return version("nnbench")
    except PackageNotFoundError:  # a checkout on PYTHONPATH, not installed
        return "(not installed)"


def main(argv: list[str] | None = None) -> int:
    """`nnbench ARGV`; without `argv` this process is the command (`python -m experiments`, the `nnbench` script),
    and a signal is honoured to its very end (`interrupts.guard_exit`)."""
    whole = argv is None
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["run"]:  # the sweep: this process becomes `python -m experiments.run`, its signals and all
        os.execv(sys.executable, [sys.executable, "-m", "experiments.run", *argv[1:]])
    chosen = next((a for a in argv if not a.startswith("-")), None)
    if chosen is not None and chosen not in COMMANDS and chosen == argv[0]:
        near = difflib.get_close_matches(chosen, COMMANDS, n=1)
        Parser(prog="nnbench").error(f"no command {chosen!r}: " + (f"did you mean nnbench {near[0]}?" if near else
                                     f"use one of {', '.join(COMMANDS)}"))
    prog = f"nnbench {chosen or ''}".strip()
    if not whole:
        with interrupts.handled():
            return guarded(argv, chosen, prog)
    interrupts.guard_exit(lambda signum: print(error_line(interrupted(signum), prog), file=sys.stderr))
    interrupts.install()
    code = guarded(argv, chosen, prog)
    interrupts.exit_with(code)
    return code


def interrupted(signum: int) -> str:
    """What every command says when a signal stopped it."""
    how = "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name
    return f"interrupted ({how}): what was finished is kept"


def guarded(argv: list[str], chosen: str | None, prog: str) -> int:
    """The command, its interrupt and its faults each one line and an exit code: one place for every command."""
    try:
        code = dispatch(argv, chosen)
        signum = interrupts.closing()
        if code == INTERRUPTED:  # the command said so, its own way
            return 128 + (signum or signal.SIGINT)
        if signum:  # a signal in the command's last step, or one whose raise a callback dropped
            raise interrupts.Interrupted(signum)
        return code
    except KeyboardInterrupt as e:  # what was finished is kept
        signum = getattr(e, "signum", None) or interrupts.closing() or signal.SIGINT
        print(error_line(interrupted(signum), prog), file=sys.stderr)
        return 128 + signum
    except BrokenPipeError:  # `nnbench compare | head`: the reader left; Python's last flush at exit goes nowhere
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return LOST
    except Exception as e:  # a fault of nnbench itself: one line to report, not a traceback
        if os.environ.get("NNBENCH_DEBUG"):
            raise
        print(error_line(f"unexpected {type(e).__name__}: {first_line(e)}: set NNBENCH_DEBUG=1 for the traceback, "
                         "and report it", prog), file=sys.stderr)
        return LOST
    finally:
        interrupts.closing()


def dispatch(argv: list[str], chosen: str | None) -> int:
    """Parse the command line and run the command asked for."""
    argv, rest = (argv[:argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (argv, [])
    top, mine = parser(chosen if chosen in COMMANDS else None)
    args, extra = top.parse_known_args(argv)
    if "overrides" in vars(args):  # a command that runs a sweep: its overrides, wherever they are, and after --
        args.overrides += [x for x in extra if not x.startswith("-")] + rest
        extra = [x for x in extra if x.startswith("-")]
    elif rest:
        extra.append("-- " + " ".join(rest))
    if extra:  # said by the command's own parser, which names the command
        (mine or top).error(f"unrecognized arguments: {' '.join(extra)}")
    try:
        return args.run(args)
    except BadInput as e:
        print(error_line(str(e), f"nnbench {args.command}"), file=sys.stderr)
        return BAD_INPUT
    except Lost as e:
        print(error_line(str(e), f"nnbench {args.command}"), file=sys.stderr)
        return LOST

"""Log saved TIMING/METADATA output as runs: `nnbench import FILE --framework-map JAX=jax-jit,PyTorch=torch-eager`.

FILE holds seed 000's lines (and nnbench's SAMPLES), e.g. the seed page's own Julia timings or a runner's
output from another machine. Each (framework, model, batch size) becomes one run with its ops, tagged
`imported=true` and with the file's SHA-256; importing the same file again adds nothing.

`--framework-map` says what each framework name in the file was: `jax-jit`, `jax-eager`, `torch-eager` or
`torch-compile` for nnbench's variants, anything else for another framework (the default: its own name).
"""
from __future__ import annotations

import argparse
from pathlib import Path

from experiments.cli.selection import add_uri
from experiments.common.config import PRECISIONS
from experiments.common.errors import OK, BadInput, first_line
from experiments.store.uris import validate


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", type=Path, help="a file of TIMING/METADATA (and SAMPLES) lines")
    p.add_argument("--framework-map", default="", help="NAME=MODE,...: e.g. JAX=jax-jit,PyTorch=torch-eager,Lux=Lux")
    p.add_argument("--precision", default="fp32", choices=PRECISIONS,
                   help="the precision the file's timings ran at (default fp32)")
    add_uri(p)
    p.add_argument("--experiment", default="nnbench", help="MLflow experiment (default %(default)s)")


def run(a: argparse.Namespace) -> int:
    from experiments.store import imported_lines, tracking  # mlflow is slow to import: only after parsing

    pairs = [pair.partition("=") for pair in a.framework_map.split(",") if pair]
    if bad := [name for name, sep, mode in pairs if not (name and sep and mode)]:
        raise BadInput(f"--framework-map {a.framework_map!r}: {bad[0]!r} is not NAME=MODE: e.g. --framework-map "
                       "JAX=jax-jit,PyTorch=torch-eager")
    try:
        data = a.file.read_bytes()
        sha, recs = imported_lines.parsed(data, {name: mode for name, _, mode in pairs}, a.precision, a.file.name)
    except OSError as e:
        raise BadInput(f"cannot read {a.file} ({e.strerror or e}): give a file of TIMING/METADATA lines") from None
    except (ValueError, UnicodeDecodeError) as e:  # lines.BadLine is a ValueError
        raise BadInput(first_line(e)) from None
    uri = validate(a.uri, a.experiment, "--uri")
    try:
        imported_lines.logged(a.file, data, sha, recs, uri, a.experiment)
    except tracking.StoreUnavailable as e:
        raise BadInput(str(e)) from None
    return OK

"""Validate a runner's lines on stdin: `python runners/reference_runner.py ... | nnbench sciml [--strict]`.

Every line must be a TIMING, METADATA or SAMPLES line as seed 000's page (the SciML page) reads them
(docs/runners.md); the first bad line is quoted with its number, exit 2. `--strict` accepts only what the SciML
page itself accepts (no SAMPLES).
"""
from __future__ import annotations

import argparse
import sys

from experiments.common.errors import OK, BadInput
from experiments.common.lines import BadLine, parse


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--strict", action="store_true", help="only what the SciML page accepts (no SAMPLES lines)")


def run(a: argparse.Namespace) -> int:
    try:
        p = parse(sys.stdin.read(), a.strict)
    except BadLine as e:
        raise BadInput(str(e)) from None
    print(f"ok: {len(p.timings)} TIMING, {len(p.metadata)} METADATA, {len(p.samples)} SAMPLES lines", file=sys.stderr)
    return OK

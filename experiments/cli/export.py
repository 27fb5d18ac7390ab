"""Stored runs as seed 000's lines: `nnbench export --format timing [model=lenet ...] [--out FILE]`.

`--format timing` prints one TIMING line per framework × model × operation × batch size (the median per call;
replicates get the median of their medians) and the METADATA lines the SciML page reads (`JAX device`, `PyTorch device`,
`JAX version`, `PyTorch version`): the lines SciMLBenchmarks' "Simple Neural Networks" page reads from its Python
child. Nothing else goes to stdout. See docs/runners.md.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from experiments.cli.selection import add_selection, select
from experiments.common.errors import OK, BadInput

FORMATS = ("timing",)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--format", choices=FORMATS, required=True, help="timing: seed 000's TIMING/METADATA lines")
    add_selection(p)
    p.add_argument("--out", type=Path, help="write the lines to this file instead of stdout")


def run(a: argparse.Namespace) -> int:
    from experiments.report.export import lines  # pandas is slow to import: only after parsing

    t, uri, _ = select(a)
    out = lines(t)
    data = "".join(f"{line}\n" for line in out).encode()
    if a.out:
        try:
            a.out.write_bytes(data)
        except OSError as e:
            raise BadInput(f"cannot write {a.out} ({e.strerror or e}): choose another --out") from None
    else:
        sys.stdout.buffer.write(data)  # bytes: what --out writes, whatever the platform and locale
        sys.stdout.flush()
    n = sum(line.startswith("TIMING\t") for line in out)
    print(f"nnbench export: {n} TIMING lines from {t['run_id'].nunique()} runs in {uri}"
          + (f", written to {a.out}" if a.out else ""), file=sys.stderr)
    return OK

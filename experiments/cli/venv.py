"""Make a measuring environment that differs from this one only in the packages you pin.

    nnbench venv /venvs/jax-0.10.1 jax==0.10.1 jaxlib==0.10.1

The new venv sees this environment's packages (a .pth file appends its site-packages), and the pinned
ones installed into it come first. Then sweep both:

    python -m experiments.run -m framework=jax model=lenet runtime.python=/venvs/jax-0.10.1/bin/python,null
"""
from __future__ import annotations

import argparse
import subprocess
import sysconfig
import venv
from pathlib import Path

from experiments.common.errors import OK, BadInput


def make(target: Path, packages: list[str]) -> Path:
    venv.EnvBuilder(with_pip=True, clear=False).create(target)
    python = target / "bin" / "python"
    site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    Path(site, "nnbench-base.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    if packages:
        subprocess.run([python, "-m", "pip", "install", "-q", *packages], check=True)
    return python


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("target", type=Path, help="the new venv's directory")
    p.add_argument("packages", nargs="*", help="pins installed in front, e.g. jax==0.10.1 jaxlib==0.10.1")


def run(a: argparse.Namespace) -> int:
    try:
        python = make(a.target.resolve(), a.packages)
    except subprocess.CalledProcessError as e:
        raise BadInput(f"could not install {' '.join(a.packages)} into {a.target} (exit {e.returncode}): "
                       "check the versions exist for this Python") from None
    print(f"runtime.python={python}")
    return OK

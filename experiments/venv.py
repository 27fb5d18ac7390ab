"""Make a measuring environment that differs from this one only in the packages you pin.

    python -m experiments.venv /venvs/jax-0.10.1 jax==0.10.1 jaxlib==0.10.1

The new venv sees this environment's packages (a .pth file appends its site-packages), and the pinned
ones installed into it come first. Then sweep both:

    python -m experiments.run -m framework=jax model=lenet runtime.python=/venvs/jax-0.10.1/bin/python,null
"""
from __future__ import annotations

import subprocess
import sys
import sysconfig
import venv
from pathlib import Path


def make(target: Path, packages: list[str]) -> Path:
    venv.EnvBuilder(with_pip=True, clear=False).create(target)
    python = target / "bin" / "python"
    site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    Path(site, "nnbench-base.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    if packages:
        subprocess.run([python, "-m", "pip", "install", "-q", *packages], check=True)
    return python


def main() -> int:
    if len(sys.argv) < 2 or sys.argv[1].startswith("-"):
        print(__doc__, file=sys.stderr)
        return 2
    python = make(Path(sys.argv[1]).resolve(), sys.argv[2:])
    print(f"runtime.python={python}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

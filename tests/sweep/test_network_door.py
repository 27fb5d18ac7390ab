"""A user's network at the sweep's door: each bad declaration is one line naming the fix, exit code 2, nothing
written. The cases call the door in this process (`commandline.explained`, what `python -m experiments.run` runs
before Hydra starts); one case runs the real command, for its exit code and its stderr."""
from __future__ import annotations

import textwrap

import pytest

from experiments.common.config import register
from experiments.common.errors import BadInput
from experiments.sweep import commandline
from tests.helpers import run

GOOD = '''
import torch
import models


def build(width: int = 8):
    return models.Network(torch=lambda: torch.nn.Linear(4, width), input=models.Array((4,)), loss="mean",
                          batch_sizes={"inference": (2,)}, weights=WEIGHTS)


WEIGHTS = None
'''
FLAX = "from flax import nnx\n" + GOOD.replace(
    "torch=lambda: torch.nn.Linear(4, width),",
    "torch=lambda: torch.nn.Linear(4, width), flax=lambda: nnx.Linear(4, width, rngs=nnx.Rngs(0)),")
FILES = {
    "nobuild.py": "import models\n",
    "raises.py": "def build():\n    raise RuntimeError('width must be even\\nsecond line')\n",
    "noinput.py": GOOD.replace("input=models.Array((4,)), ", ""),
    "noloss.py": GOOD.replace('loss="mean",', ""),
    "typo.py": FLAX.replace("WEIGHTS = None", 'WEIGHTS = {"kernel": "weight", "bias": "bais"}'),
    "good.py": FLAX.replace("WEIGHTS = None", 'WEIGHTS = {"kernel": "weight", "bias": "bias"}'),
}


@pytest.fixture(scope="module")
def nets(tmp_path_factory):
    d = tmp_path_factory.mktemp("door")
    for name, text in FILES.items():
        (d / name).write_text(textwrap.dedent(text))
    register()
    return d


def written(nets) -> list[str]:
    """What the door left behind: a store, a sweep or an output dir (Python's own __pycache__ aside)."""
    return sorted(p.name for p in nets.iterdir() if p.is_dir() and p.name != "__pycache__")


def door(nets, file: str, *keys: str) -> list[str]:
    return ["-m", "framework=torch", "model=file", f"model.path={nets / file}", *keys, "bench=quick",
            f"hydra.sweep.dir={nets / 'multirun'}", f"mlflow.tracking_uri=sqlite:///{nets}/mlruns/mlflow.db"]


@pytest.mark.parametrize("file,keys,line", [
    ("missing.py", (), r"^model.path=.*missing.py: no such file \(.*\): give the path of the Python file"),
    ("nobuild.py", (), r"^nobuild.py has no build\(\): define build\(\*\*keys\) that returns a models.Network"),
    ("raises.py", (), r"^raises.py: build\(\) raised RuntimeError: width must be even$"),
    ("good.py", ("+model.depth=3",), r"^good.py has no key depth; its keys: width$"),
    ("noinput.py", (), r"^noinput.py: the declaration has no input: add input=Image\(32, 32, 3\)"),
    ("noloss.py", (), r"^noloss.py: the declaration has no loss \(None\): add loss='sse', 'mean' or"),
    ("typo.py", (), r"weight map names bais, not a parameter of the torch module \(its parameters: bias, weight\)"),
])
def test_a_bad_network_is_one_line_naming_the_fix_and_nothing_is_written(nets, file, keys, line):
    with pytest.raises(BadInput, match=line) as e:
        commandline.explained(door(nets, file, *keys))
    assert "\n" not in str(e.value) and "Traceback" not in str(e.value)
    assert written(nets) == []


def test_the_door_takes_the_good_network(nets, monkeypatch):
    """The control: the same door passes the good file on to the probe of the workers' interpreter."""
    monkeypatch.setattr(commandline.preflight, "jobs", lambda configs, first: [c.model["path"] for c in configs])
    assert commandline.explained(door(nets, "good.py")).jobs == [str(nets / "good.py")]


def test_the_command_exits_2_with_one_line(nets):
    r = run(door(nets, "raises.py"), cwd=nets)
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        "nnbench: error: raises.py: build() raised RuntimeError: width must be even"], r.stderr[-2000:]
    assert written(nets) == []

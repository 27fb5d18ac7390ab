"""Upstream report drafts (`--issue DIR`, experiments/compare/upstream.py): the draft's text from a judged cell and
its two points' records; the standalone script on steps the backends export (every torch op), run by an interpreter
that can't import nnbench. End to end (`nnbench versions --issue`): tests/cli/test_versions.py; `bisect --issue`:
tests/cli/test_bisect.py."""
import json
import re

import pytest

from experiments.compare import upstream
from experiments.compare.paired import CellVerdict
from experiments.stats.verdicts import Verdict
from experiments.store.records import Record
from tests.cli.conftest import script
from tests.helpers.judged import judged


def side(label: str, torch_version: str, median_s: float) -> upstream.Side:
    """A side whose interpreter is no nnbench environment (no manifest): its packages come from its record's tags."""
    config = {"framework": {"name": "torch", "compile": False, "threads": 1}, "precision": {"name": "fp32"}}
    tags = {"env_spec": label, "variant": f"torch-eager fp32 runtime.python={label}", "torch_version": torch_version,
            "python_version": "3.11.7", "device_name": "cpu", "cpu_model": "a CPU", "torch_num_threads": "1"}
    record = Record("run", "slug", "ok", {"model": "lenet", "mode": "torch-eager"},
                    {"inference_median_s": median_s}, tags, config)
    return upstream.Side(record, "/nowhere/bin/python", ("a.pt2",))


def cell(ratio: float, low: float, high: float) -> CellVerdict:
    return CellVerdict("lenet", "inference", 32, "B", "A", judged(ratio, low, high, Verdict.SLOWER, 6), None, "",
                       "python -m experiments.run -m runtime.python=a,b model=lenet")


def test_the_draft_says_the_numbers_the_environments_and_how_to_run_the_script():
    a, b = side("torch==2.12.0", "2.12.0+cpu", 1e-3), side("torch==2.13.0", "2.13.0+cpu", 1.5e-3)
    text = upstream.draft(cell(1.5, 1.4, 1.6), a, b, "nnbench ab runtime.python=a,b model=lenet", "B/A: 1.49")
    title = text.splitlines()[0]
    assert title.startswith("# torch inference step 1.50x slower with torch==2.13.0 than with torch==2.12.0")
    assert "batch size 32, fp32, cpu" in title
    assert "95% interval [1.40, 1.60]" in text and "median step 1 ms against 1.5 ms" in text
    assert "Packages that differ: torch 2.12.0+cpu (A) / 2.13.0+cpu (B)." in text
    assert "| **torch** | **2.12.0+cpu** | **2.13.0+cpu** |" in text and "| Python | 3.11.7 | 3.11.7 |" in text
    assert "venv-a/bin/pip install torch==2.12.0" in text and "venv-b/bin/pip install torch==2.13.0" in text
    assert "--python-a venv-a/bin/python --python-b venv-b/bin/python" in text
    assert "B/A: 1.49" in text and "python -m experiments.run -m runtime.python=a,b model=lenet" in text


def test_one_venv_where_the_framework_is_the_same_on_both_sides():
    a, b = side("pkg==1.0", "2.13.0+cpu", 1e-3), side("pkg==2.0", "2.13.0+cpu", 2e-3)
    text = upstream.draft(cell(2.0, 1.8, 2.2), a, b, "nnbench versions pkg==1.0,2.0", "")
    assert "python3 -m venv venv && venv/bin/pip install torch==2.13.0\nvenv/bin/python repro.py" in text
    assert "What it printed" not in text  # nothing was run: nothing is quoted


@pytest.mark.slow
@pytest.mark.parametrize("op", ["grad", "training"])
def test_the_script_times_every_torch_op_exported(clean, tmp_path, op):
    """lenet's op exported by the torch backend, as side A and B (an A/A): the script runs each side and prints
    both medians and the ratio. (An exported inference step: the draft's script in tests/cli/test_versions.py.)"""
    import models
    from experiments.common.protocol import Setup
    from experiments.measure.backends import load

    backend = load("torch")
    backend.configure(Setup("fp32", "cpu", threads=1))
    for name in "ab":
        backend.export(models.load("lenet"), op, 8, 0, tmp_path / name)
    (tmp_path / "repro.py").write_text(upstream.script(["torch"]))
    sides = {s: {"label": s, "framework": "torch", "file": f"{s}.pt2", "op": op, "compile": False, "threads": 1}
             for s in "ab"}
    (tmp_path / "repro.json").write_text(json.dumps({"sides": sides}))
    r = script(tmp_path, clean)
    assert r.returncode == 0, r.stderr
    assert re.search(r"^A \(a\): median [\d.e-]+ ms per step", r.stdout, re.M), r.stdout
    assert re.search(r"^B/A: [\d.]+ \(above 1: B is slower\); B slower in \d of 6 rounds", r.stdout, re.M), r.stdout

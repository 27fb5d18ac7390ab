"""The CI recipe's script, `examples/ci/compare.sh BASE_PYTHON HEAD_PYTHON [OVERRIDES]`, run as the workflow
(examples/ci/github-actions.yml) runs it: `nnbench` on the PATH, two environments built from nnbench-planted's
wheels, its reports in the working directory and the job summary. A planted slowdown fails it naming the cell; two
environments that do the same work pass."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from experiments.common.config import ROOT
from experiments.selfcheck import planted as plant
from tests.cli.conftest import PLANTED_POINT
from tests.helpers import user_env, with_store

SCRIPT = ROOT / "examples" / "ci" / "compare.sh"
# Two pairs at first, up to six while a cell is unsettled; no change within ±10%: an A/A can't cross it, and twice
# the matmuls (2.0 against 1.0) can't miss it.
DESIGN = ["--pairs", "2", "--max-pairs", "6", "--bursts", "5", "--threshold", "10%"]


def compare_sh(base: str, head: str, cwd: Path, **env: str) -> subprocess.CompletedProcess:
    """The workflow's step: the tool's environment first on the PATH, the script given the two interpreters."""
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    return subprocess.run(["bash", str(SCRIPT), base, head, *PLANTED_POINT, *DESIGN], cwd=with_store(cwd),
                          env=user_env(PATH=path, **env), capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_a_planted_slowdown_fails_the_check_naming_the_cell(planted, tmp_path):
    """Head 2.0 against base 1.0, on GitHub (GITHUB_STEP_SUMMARY set): exit 1, the one error line names the cell,
    the summary lists it with its command, nnbench-ab.json holds its verdict."""
    summary = tmp_path / "summary.md"
    r = compare_sh(planted.python("1.0"), planted.python("2.0"), tmp_path, GITHUB_STEP_SUMMARY=str(summary))
    assert r.returncode == 1, r.stdout[-3000:] + r.stderr[-3000:]
    last = r.stderr.strip().splitlines()[-1]
    label = f"torch-eager fp32 runtime.python={plant.PROJECT}=="
    assert last.startswith(f"nnbench ab: error: slower: {plant.NAME} inference bs32 {label}2.0 over {label}1.0 "), last
    (cell,) = json.loads((tmp_path / "nnbench-ab.json").read_text())["cells"]
    assert cell["verdict"] == "slower" and cell["ratio"] > 1.1, cell
    text = summary.read_text()
    assert f"| {plant.NAME} inference bs32 |" in text and "**slower**" in text and f"`{cell['repro']}`" in text
    assert "1 of 1 cells changed" in text and not (tmp_path / "nnbench-ab.md").exists()
    assert "cells changed" not in r.stdout  # on GitHub the summary is the job's, not the log's


@pytest.mark.slow
def test_two_environments_doing_the_same_work_pass(planted, tmp_path):
    """1.0 and 1.0.1 do the same work, off GitHub: exit 0, no error line, the Markdown in nnbench-ab.md and on
    standard output, no cell changed."""
    r = compare_sh(planted.python("1.0"), planted.python("1.0.1"), tmp_path)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert not [ln for ln in r.stderr.splitlines() if ln.startswith("nnbench")], r.stderr[-3000:]
    (cell,) = json.loads((tmp_path / "nnbench-ab.json").read_text())["cells"]
    assert cell["verdict"] in ("no change", "inconclusive") and 0.9 < cell["ratio"] < 1.1, cell
    text = (tmp_path / "nnbench-ab.md").read_text()
    assert "None of 1 cells changed" in text and "<table" not in text and "| cell |" not in text
    assert text in r.stdout

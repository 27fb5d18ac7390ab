"""The CI recipe's script, `examples/ci/compare.sh BASE_PYTHON HEAD_PYTHON [OVERRIDES]`, run as the workflow
(examples/ci/github-actions.yml) runs it: `nnbench` on the PATH, the two interpreters given, its reports in the
working directory and the job summary. What the script adds to `nnbench ab` is its exit code and where its reports
go, so each interpreter stands in for an environment (tests/helpers/fake_worker.py): a head whose workers are twice
as slow fails it naming the cell; two that do the same work pass. `ab` between two real environments (nnbench-planted
1.0 and 2.0) is tests/cli/test_ab.py's, a real A/A's verdict tests/cli/test_versions.py's."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from experiments.common.config import ROOT
from tests.helpers import BRIEF, fake_interpreter, user_env, with_store

SCRIPT = ROOT / "examples" / "ci" / "compare.sh"
POINT = ["framework=torch", "model=mlp_relu", "batch_size=2", "ops=[inference]", *BRIEF, "parity=false",
         "--pairs", "2", "--bursts", "5"]

pytestmark = pytest.mark.slow


def interpreters(tmp_path: Path, head_slower: str = "1") -> tuple[str, str]:
    """The base's and the head's interpreters, each in its own directory; the head's workers `head_slower` times
    slower."""
    base, head = tmp_path / "base", tmp_path / "head"
    base.mkdir()
    head.mkdir()
    return fake_interpreter(base), fake_interpreter(head, FAKE_SLOWER=head_slower)


def compare_sh(base: str, head: str, cwd: Path, **env: str) -> subprocess.CompletedProcess:
    """The workflow's step: the tool's environment first on the PATH, the script given the two interpreters."""
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    return subprocess.run(["bash", str(SCRIPT), base, head, *POINT], cwd=with_store(cwd),
                          env=user_env(PATH=path, FAKE_FAULT="none", **env), capture_output=True, text=True,
                          timeout=600)


def test_a_slower_head_fails_the_check_naming_the_cell(tmp_path):
    """Head twice as slow as base, on GitHub (GITHUB_STEP_SUMMARY set): exit 1, the one error line names the cell,
    the summary lists it with its command, nnbench-ab.json holds its verdict."""
    summary = tmp_path / "summary.md"
    base, head = interpreters(tmp_path, head_slower="2")
    r = compare_sh(base, head, tmp_path, GITHUB_STEP_SUMMARY=str(summary))
    assert r.returncode == 1, r.stdout[-3000:] + r.stderr[-3000:]
    (cell,) = json.loads((tmp_path / "nnbench-ab.json").read_text())["cells"]
    assert cell["verdict"] == "slower" and 1.9 < cell["ratio"] < 2.1, cell
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("nnbench")]
    assert errors == [r.stderr.strip().splitlines()[-1]]
    assert errors[0].startswith(f"nnbench ab: error: slower: mlp_relu inference bs2 {cell['variant']} over "
                                f"{cell['baseline']} "), errors
    text = summary.read_text()
    assert "| mlp_relu inference bs2 |" in text and "**slower**" in text and f"`{cell['repro']}`" in text
    assert "1 of 1 cells changed" in text and not (tmp_path / "nnbench-ab.md").exists()
    assert "cells changed" not in r.stdout  # on GitHub the summary is the job's, not the log's


def test_two_environments_doing_the_same_work_pass(tmp_path):
    """Base and head alike, off GitHub: exit 0, no error line, the Markdown in nnbench-ab.md (a fresh one: an earlier
    run's report is not appended to) and on standard output, no cell changed."""
    (tmp_path / "nnbench-ab.md").write_text("an earlier run's report\n")
    r = compare_sh(*interpreters(tmp_path), tmp_path)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert not [ln for ln in r.stderr.splitlines() if ln.startswith("nnbench")], r.stderr[-3000:]
    (cell,) = json.loads((tmp_path / "nnbench-ab.json").read_text())["cells"]
    assert cell["verdict"] == "no change" and 0.99 < cell["ratio"] < 1.01, cell
    text = (tmp_path / "nnbench-ab.md").read_text()
    assert "None of 1 cells changed" in text and "<table" not in text and "| cell |" not in text
    assert "an earlier run's report" not in text and text in r.stdout

"""The shape of the code: the layers of experiments/ and their contracts (pyproject.toml), checked by import-linter;
every in-function import says why it is there."""
import ast
import re
import subprocess
import sys
from pathlib import Path

from tests.helpers import ROOT

LINT = [str(Path(sys.executable).parent / "lint-imports")]  # installed with the [test] extra


def test_layers_and_no_cycles():
    r = subprocess.run(LINT, cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert re.search(r"Contracts: (\d+) kept, 0 broken", r.stdout)
    assert "experiments/ is layered KEPT" in r.stdout and "form no cycle KEPT" in r.stdout


def test_a_broken_layer_is_caught(tmp_path):
    """The contracts can fail: the measuring core importing the store is reported as broken."""
    bad = ROOT / "experiments" / "measure" / "_layer_probe.py"
    bad.write_text("from experiments.store import records  # noqa\n")
    try:
        r = subprocess.run(LINT + ["--no-cache"], cwd=ROOT, capture_output=True, text=True)
    finally:
        bad.unlink()
    assert r.returncode != 0 and "experiments.measure._layer_probe -> experiments.store.records" in r.stdout


def test_every_import_inside_a_function_says_why():
    """A function-level import is only for keeping a framework or a heavy library out of a process that does not
    need it, and its line (or the one above) says so; never to dodge a cycle."""
    unexplained, seen = [], 0
    for path in sorted((ROOT / "experiments").rglob("*.py")):
        lines = path.read_text().splitlines()
        for fn in ast.walk(ast.parse("\n".join(lines))):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(fn):
                if isinstance(node, (ast.Import, ast.ImportFrom)):
                    seen += 1
                    first = node.lineno - 1  # a run of imports is explained once, on its first line or above it
                    while first > 0 and lines[first - 1].strip().startswith(("import ", "from ")):
                        first -= 1
                    here, above = lines[node.lineno - 1], lines[first - 1]
                    if "#" not in here and "#" not in lines[first] and not above.strip().startswith("#"):
                        unexplained.append(f"{path.relative_to(ROOT)}:{node.lineno}: {here.strip()}")
    assert seen and not unexplained, "\n".join(sorted(set(unexplained)))

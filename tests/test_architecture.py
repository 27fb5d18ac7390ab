"""The shape of the code: the layers of experiments/ and their contracts (pyproject.toml), checked by import-linter;
every in-function import says why it is there; no function grows past 40 lines or 6 parameters, no file past 400
lines; the job has no defaults of its own."""
import ast
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import ROOT

LINT = [str(Path(sys.executable).parent / "lint-imports")]  # installed with the [test] extra
CODE = ("experiments", "models", "hydra_plugins")  # the packages whose shape is held
LONGEST = 40  # lines of a function, its signature and docstring included
MOST_PARAMETERS = 6  # of a function, self and cls aside; *args and **kwargs count one each
LONGEST_FILE = 400  # lines of a module


def functions(root: Path = ROOT / "experiments"):
    """(path, function node, its source lines) for every function and method under `root`."""
    for path in sorted(root.rglob("*.py")):
        lines = path.read_text().splitlines()
        for fn in ast.walk(ast.parse("\n".join(lines))):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield path, fn, lines


def test_layers_and_no_cycles():
    r = subprocess.run(LINT, cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    kept = re.search(r"Contracts: (\d+) kept, 0 broken", r.stdout)
    assert kept and int(kept.group(1)) >= 5
    text = " ".join(r.stdout.split())  # the tool wraps long contract names
    assert "report, store and harness independent siblings KEPT" in text and "form no cycle KEPT" in text
    assert "each command stands alone" in text


@pytest.mark.parametrize("module,line,broken", [
    ("measure/_probe.py", "from experiments.store import records", "experiments.measure._probe -> experiments.store"),
    ("report/_probe.py", "from experiments.store import records", "experiments.report._probe -> experiments.store"),
    ("store/_probe.py", "import mlflow", "only store.tracking imports mlflow BROKEN"),
    ("harness/_probe.py", "from experiments.report import answer", "experiments.harness._probe -> experiments.report"),
    ("sweep/_probe.py", "from experiments.compare import paired", "experiments.sweep._probe -> experiments.compare"),
    ("compare/_probe.py", "from experiments.cli import selection", "experiments.compare._probe -> experiments.cli"),
    ("cli/_probe.py", "from experiments.cli import history", "experiments.cli._probe -> experiments.cli.history"),
    ("measure/_probe.py", "import pandas", "experiments.measure._probe -> pandas"),
    ("stats/_probe.py", "from experiments.measure import stats", "experiments.stats._probe -> experiments.measure"),
    ("measure/timing.py", "from experiments.stats import paired", "import nothing of the statistics room BROKEN"),
])
def test_a_broken_contract_is_caught(tmp_path, module, line, broken):
    """The contracts can fail, on a copy of the tree (the source is never written): the measuring core importing the
    store or the parent's tables, the statistics importing the measuring core, a worker's module judging, one sibling
    importing another, the sweep importing the paired comparison above it, the comparisons importing a command, a
    command importing another, and a second module importing mlflow are each reported broken."""
    for part in ("experiments", "models"):
        shutil.copytree(ROOT / part, tmp_path / part, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    (tmp_path / "experiments" / module).write_text(f"{line}  # noqa\n")
    r = subprocess.run(LINT + ["--no-cache"], cwd=tmp_path, capture_output=True, text=True,
                       env=os.environ | {"PYTHONPATH": str(tmp_path)})
    assert r.returncode != 0 and broken in " ".join(r.stdout.split()), r.stdout[-3000:]


def test_every_import_inside_a_function_says_why():
    """A function-level import is only for keeping a framework or a heavy library out of a process that does not
    need it, and its line (or the one above) says so; never to dodge a cycle."""
    unexplained, seen = [], 0
    for path, fn, lines in functions():
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


def everywhere():
    """`functions` of every package in CODE."""
    for part in CODE:
        yield from functions(ROOT / part)


def parameters(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    a = fn.args
    names = [x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs)]
    return len(names) - (names[:1] in (["self"], ["cls"])) + (a.vararg is not None) + (a.kwarg is not None)


def test_no_function_is_longer_than_forty_lines():
    long = [f"{path.relative_to(ROOT)}:{fn.lineno} {fn.name}: {fn.end_lineno - fn.lineno + 1} lines"
            for path, fn, _ in everywhere() if fn.end_lineno - fn.lineno + 1 > LONGEST]
    assert not long, "\n".join(long)


def test_no_function_takes_more_than_six_parameters():
    """Parameters that travel together are one value (a small frozen dataclass that names what they are)."""
    many = [f"{path.relative_to(ROOT)}:{fn.lineno} {fn.name}: {parameters(fn)} parameters"
            for path, fn, _ in everywhere() if parameters(fn) > MOST_PARAMETERS]
    assert not many, "\n".join(many)


def test_no_module_is_longer_than_four_hundred_lines():
    long = [f"{path.relative_to(ROOT)}: {n} lines" for part in CODE for path in sorted((ROOT / part).rglob("*.py"))
            if (n := len(path.read_text().splitlines())) > LONGEST_FILE]
    assert not long, "\n".join(long)


def test_the_job_adds_no_default_of_its_own():
    """Every default lives in the schema or a group's yaml: common/job.py reads the typed config, never
    `something.get(key, fallback)`."""
    source = (ROOT / "experiments" / "common" / "job.py").read_text()
    gets = [n.lineno for n in ast.walk(ast.parse(source))
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "get"]
    assert not gets, f"experiments/common/job.py calls .get( at lines {gets}"

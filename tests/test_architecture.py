"""The shape of the code: the layers of experiments/ and their contracts (pyproject.toml), checked by import-linter;
every in-function import says why it is there; no function grows past 40 lines or 6 parameters, no file past 400
lines; the job has no defaults of its own."""
import ast
import os
import shutil
import subprocess
import sys
import tomllib
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


CONTRACTS = [c["name"] for c in tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"][
    "contracts"]]
LAYERS, ALONE, MODELS, MLFLOW, MATPLOTLIB, WORKER, JUDGES, ACYCLIC = CONTRACTS  # in pyproject.toml's order


def words(text: str) -> str:
    return " ".join(text.split())  # the tool wraps long contract names


def test_every_contract_is_kept():
    r = subprocess.run(LINT, cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert f"Contracts: {len(CONTRACTS)} kept, 0 broken" in r.stdout
    assert all(f"{name} KEPT" in words(r.stdout) for name in CONTRACTS)


# Each contract, and a forbidden import that breaks it: {path under the tree: its one line}, and what the tool names
BREAKS = [
    (LAYERS, {"experiments/measure/_probe.py": "from experiments.store import records"},
     "experiments.measure._probe -> experiments.store"),
    (LAYERS, {"experiments/report/_probe.py": "from experiments.store import records"},
     "experiments.report._probe -> experiments.store"),
    (LAYERS, {"experiments/harness/_probe.py": "from experiments.report import answer"},
     "experiments.harness._probe -> experiments.report"),
    (LAYERS, {"experiments/sweep/_probe.py": "from experiments.compare import paired"},
     "experiments.sweep._probe -> experiments.compare"),
    (LAYERS, {"experiments/compare/_probe.py": "from experiments.cli import selection"},
     "experiments.compare._probe -> experiments.cli"),
    (ALONE, {"experiments/cli/_probe.py": "from experiments.cli import history"},
     "experiments.cli._probe -> experiments.cli.history"),
    (LAYERS, {"experiments/stats/_probe.py": "from experiments.measure import stats"},
     "experiments.stats._probe -> experiments.measure"),
    (JUDGES, {"experiments/measure/timing.py": "from experiments.stats import paired"},
     "experiments.measure.timing -> experiments.stats.paired"),
    (MODELS, {"models/_probe.py": "from experiments.common import errors"}, "models._probe -> experiments"),
    (MLFLOW, {"experiments/store/_probe.py": "import mlflow"}, "experiments.store._probe -> mlflow"),
    (MATPLOTLIB, {"experiments/report/_probe.py": "import matplotlib"}, "experiments.report._probe -> matplotlib"),
    (WORKER, {"experiments/measure/_probe.py": "import pandas"}, "experiments.measure._probe -> pandas"),
    (ACYCLIC, {"experiments/sweep/_probe_a.py": "from experiments.sweep import _probe_b",
               "experiments/sweep/_probe_b.py": "from experiments.sweep import _probe_a"}, "_probe_a"),
]


def test_every_contract_has_a_break():
    assert {contract for contract, _, _ in BREAKS} == set(CONTRACTS)


@pytest.mark.parametrize("contract,files,named", BREAKS, ids=[f"{c[:24]}-{n}" for c, _, n in BREAKS])
def test_a_broken_contract_is_caught(tmp_path, contract, files, named):
    """Each contract can fail, on a copy of the tree (the source is never written): one forbidden import, and the
    tool reports that contract broken, naming the import (an import up the layers also makes a cycle of the
    layer's packages: both are said)."""
    for part in ("experiments", "models"):
        shutil.copytree(ROOT / part, tmp_path / part, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    for path, line in files.items():
        (tmp_path / path).write_text(f"{line}  # noqa\n")
    r = subprocess.run(LINT + ["--no-cache"], cwd=tmp_path, capture_output=True, text=True,
                       env=os.environ | {"PYTHONPATH": str(tmp_path)})
    said = words(r.stdout)
    assert r.returncode != 0 and f"{contract} BROKEN" in said and named in said, r.stdout[-3000:]


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


def framework_literals(tree: ast.AST, names: set[str]) -> list[int]:
    """Lines that compare a framework's name or index a table by one: `x == "jax"`, `x in ("jax", "torch")`,
    `{"jax": ...}`, `t["torch"]`, `("jax", "torch")` (a list of frameworks)."""
    def named(node) -> bool:
        return isinstance(node, ast.Constant) and node.value in names

    def listed(node) -> bool:
        return isinstance(node, (ast.Tuple, ast.List, ast.Set)) and any(map(named, node.elts))

    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            pairs = zip(node.ops, node.comparators)
            if any(isinstance(op, (ast.Eq, ast.NotEq, ast.Is, ast.IsNot)) and (named(node.left) or named(right))
                   or isinstance(op, (ast.In, ast.NotIn)) and listed(right) for op, right in pairs):
                lines.append(node.lineno)
        elif isinstance(node, ast.Dict) and any(named(k) for k in node.keys if k is not None) \
                or isinstance(node, ast.Subscript) and named(node.slice) \
                or listed(node) and sum(map(named, node.elts)) > 1:
            lines.append(node.lineno)
    return lines


def test_no_code_outside_the_backends_tells_frameworks_apart_by_name():
    """What differs between frameworks is a backend's `Traits` (experiments/common/frameworks.py): a framework is its
    backend's files and its conf, and no other module compares its name or keys a table by it."""
    from experiments.common.config import backends  # the names, as the sweep finds them

    names, backends_dir = set(backends()), ROOT / "experiments" / "measure" / "backends"
    found = [f"{path.relative_to(ROOT)}:{line}" for part in ("experiments", "models")
             for path in sorted((ROOT / part).rglob("*.py")) if backends_dir not in path.parents
             for line in framework_literals(ast.parse(path.read_text()), names)]
    assert not found, "\n".join(found)
    caught = framework_literals(ast.parse('a == "jax"\nb in ("x", "torch")\n{"jax": 1}\nc["torch"]\n("jax", "torch")'),
                                {"jax", "torch"})
    assert caught == [1, 2, 3, 4, 5]

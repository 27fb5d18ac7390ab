"""Measuring environments per version spec: specs, ranges, the installers' error lines, and real environments of the
planted package built from a local index with uv and with pip, offline, cached, listed and cleaned."""
import json
import re
import site
import subprocess
import venv

import pytest

from experiments.harness import envs, installers
from experiments.measure.environment import ENV_MANIFEST, fingerprint, spec_record
from experiments.selfcheck import planted
from tests.helpers import ROOT

VERSIONS = [f"1.{i}" for i in range(8)]


@pytest.fixture
def offline(monkeypatch):
    """No pip configuration, no network for uv: only what the test's own index serves."""
    monkeypatch.setenv("PIP_CONFIG_FILE", "/dev/null")
    monkeypatch.setenv("UV_OFFLINE", "1")
    for var in ("PIP_FIND_LINKS", "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "UV_INDEX_URL", "UV_EXTRA_INDEX_URL",
                "UV_FIND_LINKS", "NNBENCH_ENV_CACHE"):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    root = tmp_path_factory.mktemp("planted")
    return planted.index(planted.wheels(root / "wheels", planted.steps(VERSIONS, "1.5", 1.3)), root / "index")


def test_specs_are_the_cross_product_and_jax_pins_jaxlib():
    specs = envs.parse(["jax==0.10.0,0.10.1", "optax==0.2.7,0.2.8"])
    assert [str(s) for s in specs] == ["jax==0.10.0 optax==0.2.7", "jax==0.10.0 optax==0.2.8",
                                       "jax==0.10.1 optax==0.2.7", "jax==0.10.1 optax==0.2.8"]
    assert specs[0].requirements == ["jax==0.10.0", "jaxlib==0.10.0", "optax==0.2.7"]
    assert envs.parse(["Nnbench_Planted==1.0"])[0].requirements == ["nnbench-planted==1.0"]


@pytest.mark.parametrize("args,message", [
    (["jax>=0.10"], "'jax>=0.10' is not PACKAGE==V1,V2,...: list the versions"),
    (["model=lenet"], "'model=lenet' is not PACKAGE==V1,V2,..."),
    (["jax==0.10.0", "jax==0.10.1"], "jax is given twice"),
    (["jax==latest"], "'latest' in 'jax==latest' is not a version"),
    ([], "no spec given"),
])
def test_bad_specs_name_the_fix(args, message):
    with pytest.raises(ValueError, match="^" + re.escape(message)):
        envs.parse(args)


def test_a_range_holds_its_ends_and_pre_releases_only_when_asked():
    vs = ["0.9.2", "0.10.0", "0.10.1", "0.10.2rc1", "0.10.2", "0.10.3.dev20260101", "0.11.0"]
    assert installers.in_range(vs, "0.10.0..0.10.2") == ["0.10.0", "0.10.1", "0.10.2"]
    assert installers.in_range(vs, "0.10.2..", pre=True) == ["0.10.2", "0.10.3.dev20260101", "0.11.0"]
    assert installers.in_range(vs, "..0.10.0") == ["0.9.2", "0.10.0"]
    with pytest.raises(ValueError, match="is not A..B"):
        installers.in_range(vs, "0.10.0")


@pytest.mark.parametrize("output,line", [
    ("error: No solution found when resolving dependencies\n  cause: Because there is no version of x==9 and you"
     "\n      require x==9, we can conclude that your requirements are unsatisfiable.\n",
     "Because there is no version of x==9 and you require x==9, we can conclude that your requirements are "
     "unsatisfiable."),
    ("  × No solution found when resolving dependencies:\n  ╰─▶ Because jax==0.9.9 was not found, we can conclude.\n",
     "Because jax==0.9.9 was not found, we can conclude."),
    ("ERROR: Could not find a version that satisfies the requirement x==9 (from versions: 1.0)\n"
     "ERROR: No matching distribution found for x==9\n",
     "Could not find a version that satisfies the requirement x==9 (from versions: 1.0)"),
])
def test_an_installers_failure_is_its_reason_in_one_line(output, line):
    assert installers.reason(output) == line


def test_conflicts_and_dependents():
    pkgs = {"jax": ("0.9.2", ["numpy>=1.26"]), "flax": ("0.12.8", ["jax>=0.10.0", "numpy"]),
            "optax": ("0.2.8", ["jax>=0.4.27", 'pytest; extra == "test"']), "numpy": ("2.3.0", []),
            "orbax": ("0.1", ["flax"]), "pandas": ("2.3", ["numpy"])}
    assert envs.conflicts(pkgs, {"jax"}) == "flax 0.12.8 needs jax>=0.10.0, but this environment has jax 0.9.2"
    assert envs.conflicts(pkgs, {"optax"}) is None
    assert envs.dependents({"jax"}, pkgs) == {"flax", "optax", "orbax"}


@pytest.mark.parametrize("how", ["uv", "pip"])
def test_a_planted_environment_differs_in_the_pin_only(offline, index, tmp_path, how):
    if how == "uv" and not installers.uv():
        pytest.skip("uv is not installed")
    base, sources = envs.packages(), envs.Sources(installers.Index(index), how, tmp_path)
    (spec,) = envs.parse(["nnbench-planted==1.5"])
    env = envs.get(spec, sources, base)
    assert env.origin == "built" and env.manifest.changes == {"nnbench-planted": (None, "1.5")}
    assert envs.diff(base, envs.packages(env.python)) == {"nnbench-planted": (None, "1.5")}
    out = subprocess.run([env.python, "-c", "import nnbench_planted as p, experiments; print(p.FACTOR)"],
                         capture_output=True, text=True, check=True).stdout
    assert out.strip() == "1.3"  # the base's packages (nnbench among them) import too
    assert envs.get(spec, sources, base).origin == "cached"
    rec = spec_record(env.python.parent.parent)
    assert rec == {"env_spec": "nnbench-planted==1.5", "env_changes": "nnbench-planted (none)→1.5",
                   "env_packages": "nnbench-planted", "nnbench_planted_version": "1.5"}
    assert fingerprint(rec) != fingerprint(rec | {"nnbench_planted_version": "1.4"})


@pytest.mark.slow
def test_a_changed_base_rebuilds_and_list_and_clean_manage_the_cache(offline, index, tmp_path):
    base, sources = envs.packages(), envs.Sources(installers.Index(index), installers.installer(), tmp_path)
    specs = envs.parse(["nnbench-planted==1.0,1.1"])
    built = [envs.get(s, sources, base) for s in specs]
    assert [m.spec for m in envs.listed(tmp_path)] == ["nnbench-planted==1.0", "nnbench-planted==1.1"]
    moved = base | {"nnbench-gone": ("1.0", [])}  # this environment had a package more when they were built
    assert envs.get(specs[0], envs.Sources(sources.index, "pip", tmp_path), moved).origin == "rebuilt"
    assert envs.clean(tmp_path, specs[1:]) == [built[1].python.parent.parent]
    assert envs.clean(tmp_path) == [built[0].python.parent.parent] and envs.listed(tmp_path) == []


def test_a_version_the_index_lacks_is_one_line_and_leaves_nothing(offline, index, tmp_path):
    (spec,) = envs.parse(["nnbench-planted==9.9"])
    with pytest.raises(envs.BuildError) as e:
        envs.get(spec, envs.Sources(installers.Index(index), installers.installer(), tmp_path), envs.packages())
    assert str(e.value).startswith("cannot install nnbench-planted==9.9: ") and "\n" not in str(e.value)
    assert "9.9" in str(e.value).split(": ", 1)[1]
    assert envs.listed(tmp_path) == [] and not any(p.is_dir() for p in tmp_path.iterdir())


def test_the_index_lists_its_versions(offline, index):
    assert installers.released("nnbench-planted", installers.Index(index)) == VERSIONS
    with pytest.raises(LookupError):
        installers.released("nnbench-nosuch", installers.Index(index))


@pytest.mark.slow
def test_the_index_lists_its_versions_with_a_fresh_venvs_pip(offline, index, tmp_path):
    """`bisect` in a venv made as the README makes it: its pip is ensurepip's (no `pip index versions --json`)."""
    venv.create(tmp_path / "v", with_pip=True)
    (v_site,) = (tmp_path / "v").glob("lib/python*/site-packages")
    (v_site / "nnbench-test.pth").write_text("\n".join([str(ROOT), *site.getsitepackages()]))  # after its own pip
    code = ("import sys; from experiments.harness import installers as i; "
            "print(i.released('nnbench-planted', i.Index(sys.argv[1])))")
    r = subprocess.run([tmp_path / "v" / "bin" / "python", "-c", code, str(index)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip() == str(VERSIONS)


def test_the_manifest_is_what_the_worker_reads(tmp_path):
    (tmp_path / ENV_MANIFEST).write_text(json.dumps({
        "spec": "jax==0.10.1", "pins": {"jax": "0.10.1", "jaxlib": "0.10.1"},
        "changes": {"jax": ["0.10.2", "0.10.1"], "jaxlib": ["0.10.2", "0.10.1"], "ml-dtypes": [None, "0.5.0"]}}))
    assert spec_record(tmp_path) == {
        "env_spec": "jax==0.10.1", "env_changes": "jax 0.10.2→0.10.1; jaxlib 0.10.2→0.10.1; ml-dtypes (none)→0.5.0",
        "env_packages": "jax jaxlib ml-dtypes", "jax_version": "0.10.1", "jaxlib_version": "0.10.1",
        "ml_dtypes_version": "0.5.0"}
    assert spec_record(tmp_path / "nowhere") == {}


def test_a_manifest_reads_and_writes_the_json_that_caches_hold(tmp_path):
    """A cached environment's nnbench-env.json reads as a Manifest and is written back byte for byte."""
    text = json.dumps({"spec": "jax==0.10.1", "pins": {"jax": "0.10.1", "jaxlib": "0.10.1"},
                       "changes": {"jax": ["0.10.2", "0.10.1"], "ml-dtypes": [None, "0.5.0"]},
                       "python": "/cache/jax-0.10.1-0123abcd/bin/python", "base_python": "/venv/bin/python",
                       "base": "0123456789abcdef", "installer": "uv", "built": "2026-01-02 03:04:05", "build_s": 41.2},
                      indent=1)
    (tmp_path / ENV_MANIFEST).write_text(text)
    m = envs.Manifest.read(tmp_path)
    assert m.changes == {"jax": ("0.10.2", "0.10.1"), "ml-dtypes": (None, "0.5.0")} and m.build_s == 41.2
    m.write(tmp_path)
    assert (tmp_path / ENV_MANIFEST).read_text() == text
    assert envs.Manifest.read(tmp_path / "nowhere") is None


def test_a_backend_that_fails_its_step_in_a_built_environment_is_one_line(tmp_path):
    """The smoke step (one LeNet training step per changed framework) fails: a BuildError naming the spec, the
    framework, what else moved to fit, and the step's last line."""
    python = tmp_path / "python"
    python.write_text("#!/bin/sh\necho 'Traceback (most recent call last):' >&2\n"
                      "echo 'AttributeError: module jax has no attribute tree' >&2\nexit 1\n")
    python.chmod(0o755)
    (spec,) = envs.parse(["jax==0.10.0"])
    changes = {"jax": ("0.10.2", "0.10.0"), "jaxlib": ("0.10.2", "0.10.0"), "ml-dtypes": ("0.5.1", "0.5.0")}
    with pytest.raises(envs.BuildError) as e:
        envs.smoke(python, spec, changes)
    assert str(e.value) == ("jax==0.10.0: nnbench's jax backend fails with ml-dtypes 0.5.1→0.5.0 moved to fit: "
                            "AttributeError: module jax has no attribute tree")

"""Fixtures the command tests share: a real store, nnbench-planted's releases served by a local index, and an
interpreter that has torch but can't import nnbench (where an upstream draft's script runs)."""
import contextlib
import subprocess
import sysconfig
import venv
from pathlib import Path
from types import SimpleNamespace

import pytest

from experiments.measure.reading import Paired
from experiments.selfcheck import planted as plant
from experiments.store import records, sweepdir
from tests.helpers import run_cache, with_store

# nnbench-planted's releases for the paired commands (version: its network's extra matmuls, experiments/selfcheck/
# planted.py): 1.0.1 does 1.0's work (A/A), 1.1 and 1.2 60% more, 2.0 twice as much: steps no load hides (a 30% one
# was read inconclusive on a busy machine).
PLANTED = {"1.0": 1.0, "1.0.1": 1.0, "1.1": 1.6, "1.2": 1.6, "2.0": 2.0}
# Its network as one cell big enough to time in 20 ms bursts (10 to 20 matmuls of 128, one thread), on a quick budget
# with no machine check and no parity check (what the paired tests read is the verdict; its FLOPs are still counted).
PLANTED_POINT = [f"model={plant.NAME}", "model.n=128", "model.depth=10", "framework=torch", "framework.threads=1",
                 "batch_size=32", "ops=[inference]", "bench=quick", "parity=false", "bench.machine_check_s=0"]
INDEX_VARIABLES = ("PIP_FIND_LINKS", "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "UV_INDEX_URL", "UV_EXTRA_INDEX_URL",
                   "UV_FIND_LINKS")


def paired_point(sweep_dir: Path, variant: str, baseline: str, judged, params: dict[str, str], slug: str) -> None:
    """B's point of a one-cell paired sweep, judged against A (`judged`: `judge_pairs`' cell for its op), saved where
    and as the paired sweep saves it (job 1's point, in the group leader's dir 0): what a stand-in sweep leaves for
    `compare.paired.verdicts` to read."""
    reading = SimpleNamespace(ops={}, paired=Paired(variant, baseline, {params["ops"]: judged}))
    records.Record(f"{params['model']} bs{params['batch_size']} {variant}", slug, "ok", params,
                   records.paired_metrics(reading), records.paired_tags(reading)).save(
        sweepdir.point_dir(sweepdir.job_dir(sweep_dir / "0", 1), slug))


@pytest.fixture(scope="session")
def paired_store(tmp_path_factory):
    """One real sqlite store for the tests that log paired comparisons (creating one takes seconds); each test reads
    the runs it started."""
    from experiments.store import tracking

    uri = f"sqlite:///{with_store(tmp_path_factory.mktemp('store'), 'mlflow.db')}/mlflow.db"
    tracking.Store(uri).open("nnbench")
    return uri


class Planted:
    """nnbench-planted's releases (PLANTED, or others) on a local package index, their environments built once, offline, into
    one cache: `nnbench versions` and `bisect` find them there too."""

    def __init__(self, root: Path, releases: dict[str, float] = PLANTED, cache: Path | None = None):
        self.url = plant.index(plant.wheels(root / "wheels", releases), root / "index")
        self.cache = cache or root / "envs"

    @contextlib.contextmanager
    def offline(self):
        """Only this index, no network for uv, this cache of environments (for this process and its children)."""
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("PIP_CONFIG_FILE", "/dev/null")
            mp.setenv("UV_OFFLINE", "1")
            mp.setenv("NNBENCH_ENV_CACHE", str(self.cache))
            for var in INDEX_VARIABLES:
                mp.delenv(var, raising=False)
            yield

    def python(self, version: str) -> str:
        """The interpreter of the version's environment (built now, or from the cache)."""
        from experiments.harness import envs, installers

        with self.offline():
            (spec,) = envs.parse([f"{plant.PROJECT}=={version}"])
            sources = envs.Sources(installers.Index(self.url), installers.installer(), self.cache)
            return str(envs.get(spec, sources, envs.packages()).python)


@pytest.fixture(scope="session")
def planted(tmp_path_factory) -> Planted:
    """PLANTED's environments in one cache for the run: every worker's index serves the same wheels (the same bytes)."""
    return Planted(tmp_path_factory.mktemp("planted"), cache=run_cache(tmp_path_factory, "planted-envs"))


def isolated_python(root: Path) -> str:
    """An interpreter that imports this environment's packages (torch among them) but not nnbench: a venv whose
    path holds this site-packages as a plain entry, so that its .pth files (nnbench's editable finder) never run."""
    venv.EnvBuilder(symlinks=True).create(root)
    python = root / "bin" / "python"
    site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    Path(site, "base.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return str(python)


def script(folder: Path, python: str) -> subprocess.CompletedProcess:
    """The folder's repro.py as a user runs it: in the folder, this interpreter, no PYTHONPATH."""
    return subprocess.run([python, "-I", "repro.py", "--rounds", "6", "--burst-ms", "20"], cwd=folder,
                          capture_output=True, text=True, timeout=300, env={"PATH": "/usr/bin:/bin"})


@pytest.fixture(scope="module")
def clean(tmp_path_factory) -> str:
    """An interpreter that has torch but can't import nnbench (isolated_python), checked: an upstream draft's
    script must run there."""
    python = isolated_python(tmp_path_factory.mktemp("clean"))
    for module in ("experiments", "models"):
        r = subprocess.run([python, "-I", "-c", f"import {module}"], capture_output=True, text=True,
                           env={"PATH": "/usr/bin:/bin"}, cwd="/")
        assert r.returncode and "ModuleNotFoundError" in r.stderr, f"{module} imports in the isolated interpreter"
    return python

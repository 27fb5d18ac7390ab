"""nnbench-planted's network (`model=planted`) in environments built offline: this process sees it only through
them, and each environment's version decides the work in the worker's own step (its FLOPs, its paired time)."""
import json
import math
import subprocess
import sys

import pytest

from experiments.common import config
from experiments.harness import envs, installers, pairs
from experiments.stats.paired import judge_pairs
from experiments.selfcheck import planted
from experiments.sweep import commandline

VERSIONS = {"1.0": 1.0, "3.0": 3.0}  # 10 matmuls a step against 30
KEYS = {"name": planted.NAME, "n": 64, "depth": 10}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("planted-network")
    url = planted.index(planted.wheels(root / "wheels", VERSIONS), root / "index")
    with pytest.MonkeyPatch.context() as mp:  # offline: only the local index
        mp.setenv("PIP_CONFIG_FILE", "/dev/null")
        mp.setenv("UV_OFFLINE", "1")
        specs = envs.parse([f"{planted.PROJECT}=={','.join(VERSIONS)}"])
        sources = envs.Sources(installers.Index(url), installers.installer(), root / "envs")
        return {v: envs.get(s, sources, envs.packages())
                for v, s in zip(VERSIONS, specs)}


def test_runtime_python_values_are_read_from_the_command_line():
    assert commandline.pythons(["model=lenet", "runtime.python='/a b/python','/c/python'"]) == ["/a b/python",
                                                                                               "/c/python"]
    assert commandline.pythons(["runtime.python=/c/python"]) == ["/c/python"]
    assert commandline.pythons(["runtime.python=null", "runtime.python=[unclosed"]) == []


@pytest.mark.slow
def test_the_network_is_seen_here_only_through_the_environments(built, monkeypatch):
    import models

    monkeypatch.setattr(sys, "path", list(sys.path))  # see_packages_of appends to a copy
    assert planted.NAME not in models.installed() and planted.NAME not in config.installed_models()
    config.see_packages_of([str(built["1.0"].python), "/no/such/python"])  # a wrong path is the door's to report
    assert planted.NAME in models.installed() and set(config.installed_models()[planted.NAME].__dataclass_fields__) \
        == {"name", "n", "depth"}


@pytest.mark.slow
def test_the_door_checks_a_network_only_the_environments_declare(built, monkeypatch, tmp_path):
    """`nnbench versions nnbench-planted==1.0,3.0 model=planted`: this interpreter doesn't have the network, so the
    overrides are checked again once the environments are built, with their networks; a model no environment
    declares is still one line."""
    from experiments.common.errors import BadInput
    from experiments.compare.across_envs import Sweep, jobs

    monkeypatch.setattr(sys, "path", list(sys.path))  # register appends the environments' site-packages to a copy
    overrides = (f"model={planted.NAME}", "model.n=64", "framework=torch", "ops=[inference]")
    sweep = Sweep("versions", overrides, f"sqlite:///{tmp_path}/mlflow.db", "nnbench")
    with pytest.raises(BadInput, match=planted.NAME):
        jobs(sweep)  # no environments to ask
    asked = []
    (job,) = jobs(sweep, lambda: asked.append(1) or list(built.values()))
    assert asked == [1] and job.config.model["name"] == planted.NAME and job.config.model["n"] == 64
    sweep = Sweep("versions", ("model=no_such_network", *overrides[1:]), sweep.uri, "nnbench")
    with pytest.raises(BadInput, match="no_such_network"):
        jobs(sweep, lambda: list(built.values()))


@pytest.mark.slow
def test_each_environment_s_version_decides_the_work_in_its_step(built):
    """The parity process (both frameworks) in each environment: the same function in torch and Flax, and FLOPs 3x
    with version 3.0's factor."""
    flops = {}
    for v, env in built.items():
        r = subprocess.run([str(env.python), "-m", "experiments.measure.parity", json.dumps(KEYS), "inference:4"],
                           capture_output=True, text=True, cwd="/", timeout=600)
        proof = json.loads(r.stdout.strip().splitlines()[-1])
        assert proof["parity"]["status"] == "ok", proof
        flops[v] = proof["flops"][0]["flops"]
    assert flops["1.0"] == 2 * 4 * 64 * 64 * 10 and flops["3.0"] == 3 * flops["1.0"]


@pytest.mark.slow
def test_one_paired_worker_per_environment_times_its_own_version(built, tmp_path):
    """The paired engine, two sides and one trial (`pairs.compare`): each worker reports its own environment's
    version, and the version with 3x the matmuls reads slower (a ratio, side by side, not a time)."""
    config.register([str(e.python) for e in built.values()])
    # 256 wide, one thread: each call's matmuls outweigh the step's fixed cost and another program's thread waits
    job = {v: commandline.explained(["-m", f"model={planted.NAME}", "model.n=256", "model.depth=10", "batch_size=4",
                                     "ops=[inference]", "framework=torch", "framework.threads=1", "parity=false",
                                     f"runtime.python='{e.python}'"]).jobs[0] for v, e in built.items()}
    (c,) = pairs.compare(pairs.Side.of(job["1.0"], "1.0"), pairs.Side.of(job["3.0"], "3.0"),
                         pairs.Design(rounds=20, trials=1, max_trials=1), judge_pairs, tmp_path)
    (trial,) = c.compared.trials
    assert trial.failure is None and all(t.ok for t in trial.turns), trial.failure
    assert [t.ready.environment["nnbench_planted_version"] for t in trial.turns] == ["1.0", "3.0"]
    assert math.exp(trial.log_ratio(1, 0)) > 1.5 and c.log_ratios == [trial.log_ratio(1, 0)]

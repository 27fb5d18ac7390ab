"""Config composition of every option, the errors for misspellings and bad values, and which jobs a sweep measures
together (paired)."""
from itertools import product

import pytest
from hydra.errors import ConfigCompositionException, HydraException
from omegaconf.errors import ValidationError

import models
from experiments.common.errors import BadInput
from experiments.harness import manager
from experiments.sweep import hydra_errors, paired_engine, preflight
from experiments.common.config import Precision, frameworks
from experiments.common.protocol import Point
from tests.helpers import ROOT


def options(group: str) -> list[str]:
    return sorted(p.stem for p in (ROOT / "conf" / group).glob("*.yaml"))


GROUPS = {
    "framework": frameworks(),
    "model": models.available(),
    "precision": [p.value for p in Precision],
    "bench": ["default", "quick", "thorough"],
}


@pytest.mark.parametrize("group", ["framework", "model", "precision"])
def test_each_option_has_a_yaml_and_each_yaml_an_option(group):
    own = [models.FILE] if group == "model" else []  # model=file needs model.path: tests/models/test_network.py
    assert options(group) == sorted(GROUPS[group] + own)


@pytest.mark.parametrize("preset,frameworks_,model,ops", [
    ("seed000", "jax,torch", "mlp_relu,mlp_gelu,mlp_batchnorm,lenet,resnet", ["inference", "training"]),
    ("seed004", "jax,torch", None, ["inference", "grad"]),
])
def test_presets_compose(make_cfg, preset, frameworks_, model, ops):
    cfg = make_cfg(f"experiment={preset}", hydra=True)
    c = preflight.typed(cfg)
    assert c.ops == ops
    params = cfg.hydra.sweeper.params
    assert params["framework"] == frameworks_
    if model:
        assert params["model"] == model
    else:
        assert c.model["name"] == "matmul_chain" and c.precision.name == "bf16"
        assert params["framework.compile"] == "true,false"
        assert c.model["n"] in (1000, 10000) and c.report.baseline == "torch-eager bf16"
    preflight.job(c)


@pytest.mark.parametrize("group,option", [(g, o) for g, opts in GROUPS.items() for o in opts])
def test_every_option_composes(make_cfg, group, option):
    runner = ["external.name=Reference", "external.command='python runners/reference_runner.py --model {model}'"]
    c = preflight.typed(make_cfg(f"{group}={option}", *(runner if option == "external" else [])))
    if group == "model":
        assert c.model["name"] == option
    elif group != "bench":
        assert getattr(c, group).name == option
    preflight.job(c)


def test_defaults_follow_each_frameworks_idiom(make_cfg):
    assert make_cfg("framework=jax").framework.compile is True
    assert make_cfg("framework=torch").framework.compile is False
    c = preflight.typed(make_cfg())
    assert c.ops == ["inference", "training"] and c.device == "auto" and c.batch_size is None
    assert (c.precision.name, c.precision.tf32) == ("fp32", False)
    assert (c.runtime.start, c.runtime.compile_cache) == ("fork", True)  # the schema's defaults, nothing else's


@pytest.mark.parametrize("bench,trials,rounds,most,ci", [("quick", 1, 5, 1, 0.5), ("default", 5, 25, 12, 0.1),
                                                          ("thorough", 10, 75, 24, 0.02)])
def test_each_bench_preset_sets_its_paired_trials(make_cfg, bench, trials, rounds, most, ci):
    """bench.processes is the paired trials at first; unsettled cells get more, up to max_processes."""
    b = preflight.typed(make_cfg(f"bench={bench}")).bench
    assert (b.paired, b.processes, b.rounds, b.max_processes, b.target_ratio_ci) == (True, trials, rounds, most, ci)
    assert b.burst_s == 0.02 and b.processes <= b.max_processes


def test_the_jobs_that_differ_only_in_a_variant_key_are_measured_together(make_cfg):
    """A group per cell: jobs that differ in framework, precision, device or runtime; not in model or batch size;
    a job alone where it is unpaired (bench.paired=false, an external runner)."""
    def jobs(*sweep: list[str]):  # the sweep's jobs in Hydra's order: the last key varies fastest
        return [preflight.job(preflight.typed(make_cfg(*keys, "ops=[inference]"))) for keys in product(*sweep)]

    frameworks, models_ = ["framework=jax", "framework=torch"], ["model=lenet", "model=mlp_relu"]
    assert paired_engine.plan(jobs(models_, frameworks)) == [[0, 1], [2, 3]]
    spanned = jobs(frameworks, ["precision=fp32", "precision=bf16"], ["batch_size=8", "batch_size=32"])
    assert paired_engine.plan(spanned) == [[0, 2, 4, 6], [1, 3, 5, 7]]
    assert paired_engine.plan(jobs(frameworks, ["bench.paired=false"])) == [[0], [1]]
    runner = ["framework=external", "external.name=Reference",
              "external.command='python runners/reference_runner.py --model {model}'"]
    mixed = jobs(["framework=jax"]) + [preflight.job(preflight.typed(make_cfg(*runner, "ops=[inference]")))]
    assert paired_engine.plan(mixed) == [[0], [1]]


@pytest.mark.parametrize("device", ["auto", "cpu"])
def test_device_options(make_cfg, device):
    assert preflight.typed(make_cfg(f"device={device}")).device == device


@pytest.mark.parametrize("override", ["model=lenett", "framework=flax", "precision=fp8", "bench=fast"])
def test_misspelled_option_fails(make_cfg, override):
    with pytest.raises(HydraException, match="Could not find|not found"):
        make_cfg(override)


@pytest.mark.parametrize("override", ["bench.max_tme=1", "framework.compiled=true", "batchsize=4"])
def test_misspelled_key_fails(make_cfg, override):
    with pytest.raises(ConfigCompositionException):
        make_cfg(override)


@pytest.mark.parametrize("override", ["device=gpuu", "ops=[inference,train]", "batch_size=big"])
def test_bad_value_fails(make_cfg, override):
    with pytest.raises((ConfigCompositionException, ValidationError)):
        make_cfg(override)


@pytest.mark.parametrize("override,line", [
    ("model=lenett", "unknown model 'lenett' (did you mean lenet? choose dscnn, file, gpt_tiny, lenet, lstm"),
    ("batchsize=4", "unknown key 'batchsize': did you mean batch_size?"),
    ("device=gpuu", "device must be one of auto, cpu, gpu, tpu (got 'gpuu')"),
    ("ops=[inference,train]", "ops holds unknown op (got 'train')"),
    ("bench.max_tme=1", "unknown key 'bench.max_tme': did you mean bench.max_time_s?"),
    ("experiment=seed0004", "unknown experiment 'seed0004' (did you mean seed004"),
])
def test_composition_errors_read_as_one_line(make_cfg, override, line):
    with pytest.raises(Exception) as e:
        make_cfg(override)
    explained = hydra_errors.explain(e.value)
    assert line in explained and "\n" not in explained


@pytest.mark.parametrize("override,match", [
    ("batch_size=0", "batch_size must be a positive integer"),
    ("batch_size=-3", "batch_size=32"),
    ("ops=[]", "ops is empty"),
    ("runtime.python=/nonexistent/python", "not an executable interpreter"),
    ("runtime.python=/tmp", "not an executable interpreter"),
    ("bench.timeout_s=0", "bench.timeout_s must be positive"),
    ("seed=-1", "seed must be in"),
    ("report.baseline='torch-eager fp8'", "report.baseline must be '<mode> <precision>'"),
])
def test_validate_names_the_fix(make_cfg, override, match):
    with pytest.raises(BadInput, match=match):
        preflight.job(preflight.typed(make_cfg(override)))


def test_matmul_chain_keys_are_checked(make_cfg):
    with pytest.raises(BadInput):
        preflight.job(preflight.typed(make_cfg("model=matmul_chain", "+model.widht=3")))


def test_plan_uses_the_seed_lists(make_cfg):
    c = preflight.typed(make_cfg("model=lenet"))
    points = preflight.plan(c, preflight.model_spec(c))
    assert [(p.batch_size, p.ops) for p in points] == [
        (2, ("inference",)), (8, ("inference",)), (32, ("inference", "training")), (128, ("inference", "training"))]


def test_plan_single_batch_size_runs_every_op(make_cfg):
    c = preflight.typed(make_cfg("model=lenet", "batch_size=4", "ops=[inference,grad]"))
    assert preflight.plan(c, preflight.model_spec(c)) == (Point(4, ("inference", "grad")),)


def test_plan_matmul_chain_batch_is_m_and_keeps_unsupported_ops(make_cfg):
    c = preflight.typed(make_cfg("model=matmul_chain", "model.m=64"))
    assert preflight.plan(c, preflight.model_spec(c)) == (Point(64, ("inference", "training")),)


def test_a_sweep_started_by_a_command_asks_nothing_its_door_found(make_cfg, monkeypatch):
    """What the door of `nnbench ab`, `versions` or `bisect` found reaches the sweep it starts (preflight.FOUND): that
    sweep's door probes none of the same interpreters again and builds no network's sides again; its jobs carry the
    command's fingerprints and parameter counts."""
    net = ROOT / "tests" / "fixtures" / "nets" / "attention.py"
    configs = [preflight.typed(make_cfg(f"framework={fw}", "model=file", f"model.path={net}")) for fw in ("jax", "torch")]
    monkeypatch.setattr(preflight, "_found", {"probes": {}, "networks": {}})
    monkeypatch.setattr(manager, "probe", lambda asks: [(None, f"fingerprint-{fw}", "cpu") for _, fw, _, _ in asks])
    command = preflight.jobs(configs)  # the command's door: the interpreter probed, the network built

    def asked_again(*args):
        raise AssertionError(f"asked again: {args}")

    monkeypatch.setattr(preflight, "_passed", preflight.passed(preflight.found()))  # as its sweep's door reads it
    monkeypatch.setattr(manager, "probe", asked_again)
    monkeypatch.setattr(models._check, "checked", asked_again)
    monkeypatch.setattr(models._load, "_LOADED", {})  # the sweep's process: nothing loaded yet
    sweep = preflight.jobs(configs)
    assert [j.fingerprint for j in sweep] == [j.fingerprint for j in command] == ["fingerprint-jax", "fingerprint-torch"]
    assert sweep[0].spec.params == command[0].spec.params and set(sweep[0].spec.params) == {"flax", "torch"}
    assert preflight.passed("{not json") == preflight.passed(None) == {"probes": {}, "networks": {}}

"""The door: a composed config becomes a validated, typed `Job` (its points planned), or one BadInput line naming the
fix; everything that can be known wrong before measuring, validated the same for single runs and sweeps. Parent side."""
from __future__ import annotations

import contextlib
import copy
import ctypes.util
import dataclasses
import functools
import json
import math
import os
import sys
import typing
from collections.abc import Callable

from omegaconf import DictConfig, OmegaConf, open_dict

import models
from experiments.common.config import ALLOCATORS, DEFAULT_BASELINE, EXTERNAL, PRECISIONS, VARIANT_KEYS, Config
from experiments.common.errors import BadInput
from experiments.common.frameworks import traits
from experiments.common.job import Job
from experiments.common.protocol import Point, Setup
from experiments.harness import external, manager
from experiments.sweep import hydra_errors


# What a command's door found, passed to the sweep it starts in a child process (`compare.paired.sweep`): each
# probe's answer and each user's network's parameter counts. The child's door meets the same interpreters and
# networks a moment later and doesn't ask them again (an import of each framework); what isn't there, it asks.
FOUND = "NNBENCH_DOOR_FOUND"
_found: dict[str, dict] = {"probes": {}, "networks": {}}  # what this process's doors found, to pass on


def found() -> str:
    """What this process's door found, for `FOUND` in the environment of a sweep it starts."""
    return json.dumps(_found)


def passed(text: str | None) -> dict[str, dict]:
    """`FOUND` as a door reads it: nothing where it is missing or malformed."""
    with contextlib.suppress(ValueError, TypeError, AttributeError):
        got = json.loads(text or "{}")
        return {k: dict(got.get(k) or {}) for k in ("probes", "networks")}
    return {"probes": {}, "networks": {}}


_passed = passed(os.environ.get(FOUND))  # what the command that started this process passed on


@functools.cache
def has_library(lib: str) -> bool:
    """Whether the linker finds `lib` (it runs ldconfig: once per library, not once per job)."""
    return ctypes.util.find_library(lib.removeprefix("lib").split(".so")[0]) is not None


def typed(cfg: DictConfig) -> Config:
    """The composed job config, without Hydra's own node, as the schema's `Config` (resolved; BadInput for a key
    the schema lacks, which `+key=...` can add and nothing would read)."""
    cfg = copy.deepcopy(cfg)
    with open_dict(cfg):
        cfg.pop("hydra", None)
    unknown_keys(cfg)
    config = OmegaConf.to_object(cfg)
    if dataclasses.is_dataclass(config.model):  # an installed network's node, typed by its keys: its keys, as data
        config.model = dataclasses.asdict(config.model)
    return config


def unknown_keys(cfg: DictConfig) -> None:
    """Keys of the config, and of its groups of keys, that the schema doesn't have (model keys: models.load)."""
    hints = typing.get_type_hints(Config)
    for key in cfg:
        if key not in hints:
            raise BadInput(hydra_errors.unknown_key(key, list(hints)))
        if dataclasses.is_dataclass(hints[key]) and isinstance(cfg[key], DictConfig):
            names = [f.name for f in dataclasses.fields(hints[key])]
            for sub in cfg[key]:
                if sub not in names:
                    raise BadInput(hydra_errors.unknown_key(f"{key}.{sub}", names))


def model_spec(config: Config) -> models.ModelSpec:
    name, keys = config.model["name"], {k: v for k, v in config.model.items() if k != "name"}
    key = json.dumps([name, sorted(keys.items())], default=str)
    try:
        if (params := _passed["networks"].get(key)) is None:
            spec = models.load(name, **keys)
        else:  # checked by the command that started this sweep
            spec = models.known(name, params, **keys)
    except (ValueError, TypeError) as e:
        raise BadInput(str(e)) from None
    if isinstance(spec, models.Network):
        _found["networks"][key] = spec.params
    return spec


# Budget keys with a stricter rule than "a finite number >= 0" (which every numeric bench key must be).
BENCH_RULES = {
    "min_samples": (lambda v: v >= 1, "at least 1"),
    "processes": (lambda v: v >= 1, "at least 1 (fresh worker processes per point)"),
    "rounds": (lambda v: v >= 1, "at least 1 (paired: bursts per variant, per cell and trial)"),
    "burst_s": (lambda v: v > 0, "positive (paired: seconds of one burst)"),
    "max_time_s": (lambda v: v > 0, "positive (seconds of sampling per op)"),
    "target_rel_ci": (lambda v: 0 < v < 1, "between 0 and 1 (0.02: stop at a ±2% CI of the median)"),
    "timeout_s": (lambda v: v > 0, "positive (seconds per point, worker start and compile included)"),
}


def validate_values(config: Config) -> None:
    """Ranges the schema's types can't say; raises BadInput naming the fix."""
    bs = config.batch_size
    if bs is not None and bs <= 0:
        raise BadInput(f"batch_size must be a positive integer (got {bs}): use e.g. batch_size=32, "
                       "or batch_size=null for the model's batch lists")
    if config.repeat < 0:
        raise BadInput(f"repeat is a replicate index (got {config.repeat}): use e.g. repeat=0,1,2")
    if not 0 <= config.seed < 2**32:
        raise BadInput(f"seed must be in [0, 2**32) (got {config.seed}): use e.g. seed=0")
    if not config.ops:
        raise BadInput("ops is empty: use e.g. ops=[inference,training] (ops: inference, training, grad)")
    fw = config.framework
    if fw.compile_mode == "reduce-overhead" and fw.name != EXTERNAL and traits(str(fw.name)).cuda_graphs \
            and (not fw.compile or config.device == "cpu"):
        raise BadInput("framework.compile_mode=reduce-overhead is torch.compile's CUDA graphs: it needs "
                       "framework.compile=true and a GPU (device=gpu), or drop framework.compile_mode")
    bench = config.bench
    for key, v in ((f.name, getattr(bench, f.name)) for f in dataclasses.fields(bench)):
        test, what = BENCH_RULES.get(key, (lambda v: v >= 0, "a number >= 0"))
        if isinstance(v, (int, float)) and not isinstance(v, bool) and not (math.isfinite(v) and test(v)):
            raise BadInput(f"bench.{key} must be {what} (got {v}): use e.g. bench=quick, or bench.{key}=<value>")
    if bench.max_samples < bench.min_samples:
        raise BadInput(f"bench.max_samples ({bench.max_samples}) is below bench.min_samples "
                       f"({bench.min_samples}): raise it")
    along = config.report.along
    if along and along.split(".")[0] not in VARIANT_KEYS:
        raise BadInput(f"report.along={along} is not a key a cell's variants span: one under "
                       f"{', '.join(VARIANT_KEYS)}, e.g. report.along=runtime.python")
    for key, lo, hi in (("threshold", 0, 1), ("alpha", 0, 1)):
        value = getattr(config.report, key)
        if not lo <= value < hi or (key == "alpha" and value == 0):
            raise BadInput(f"report.{key}={value} is not a fraction in [{lo}, {hi}): e.g. report.{key}=0.05")
    mode, _, prec = config.report.baseline.partition(" ")  # modes: jax-jit, torch-compile-cg, a runner's name
    if not mode or prec not in PRECISIONS:
        raise BadInput(f"report.baseline must be '<mode> <precision>' (got {config.report.baseline!r}): e.g. "
                       f"'{DEFAULT_BASELINE}'; precisions {', '.join(PRECISIONS)}")


def job(config: Config) -> Job:
    """The job, validated without starting anything; raises BadInput naming the fix."""
    validate_values(config)
    spec = model_spec(config)
    this = Job(config, spec, plan(config, spec))
    if not (os.path.isfile(this.python) and os.access(this.python, os.X_OK)):
        raise BadInput(f"runtime.python={this.python} is not an executable interpreter: give the path of a venv's "
                       "bin/python, or runtime.python=null")
    if config.framework.name == EXTERNAL:
        try:
            external.validate(config.external.command, config.external.name, this.python)
        except ValueError as e:
            raise BadInput(str(e)) from None
    allocator = config.runtime.allocator
    if "LD_PRELOAD" in ALLOCATORS[allocator]:
        lib = ALLOCATORS[allocator]["LD_PRELOAD"]
        if not has_library(lib):
            raise BadInput(f"runtime.allocator={allocator} needs {lib}: apt-get install "
                           f"{'libjemalloc2' if allocator == 'jemalloc' else 'libtcmalloc-minimal4'}, "
                           "or runtime.allocator=glibc")
    return this


def jobs(configs: list[Config], first: Callable[[list[Job]], None] = lambda jobs: None) -> list[Job]:
    """Every job of a run or a sweep, validated, and each interpreter asked (all at once) whether it can measure;
    `first`, a command's own checks of the jobs (BadInput), runs before the probes: a second or more of importing
    each framework."""
    validated = [job(c) for c in configs]
    first(validated)
    asks = {ask(j) for j in validated if j.config.framework.name != EXTERNAL}
    new = [a for a in asks if asked(a) not in _passed["probes"]]
    answers = {asked(a): _passed["probes"][asked(a)] for a in asks if asked(a) in _passed["probes"]}
    for a, (problem, fingerprint, device) in zip(new, manager.probe(new) if new else []):
        if problem and a[0] == sys.executable:
            raise BadInput(problem)
        if problem:
            raise BadInput(f"runtime.python={a[0]} cannot measure framework={a[1]} ({problem}): let `nnbench "
                           "versions PACKAGE==VERSION OVERRIDES` build the environment (see docs/comparing.md)")
        answers[asked(a)] = [fingerprint, device]
    _found["probes"] |= answers
    return [dataclasses.replace(j, fingerprint=answers[asked(ask(j))][0], device=answers[asked(ask(j))][1])
            if ask(j) in asks else j for j in validated]


def ask(job: Job) -> tuple[str, str, Setup, str]:
    """What a probe is asked: interpreter, framework, set-up and allocator (the allocator is in the fingerprint)."""
    return job.python, str(job.config.framework.name), job.setup, str(job.config.runtime.allocator)


def asked(a: tuple[str, str, Setup, str]) -> str:
    """A probe's question as a key of `FOUND`."""
    python, fw, setup, allocator = a
    return json.dumps([python, fw, setup.to_json(), allocator])


def plan(config: Config, spec: models.ModelSpec) -> tuple[Point, ...]:
    """The points of a job: one per batch size, each with the ops whose batch lists hold that size."""
    ops = tuple(dict.fromkeys(str(op) for op in config.ops))
    if config.batch_size is not None:
        return (Point(config.batch_size, ops),)
    lists = spec.batch_sizes
    sizes = sorted({b for op in ops for b in lists.get(op, ())})
    # An op without a batch list still runs at every size, so its skip reason is recorded, not lost.
    return tuple(Point(b, tuple(op for op in ops if b in lists.get(op, ()) or not lists.get(op))) for b in sizes)

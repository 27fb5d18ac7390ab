"""The door: a composed config becomes a validated, typed `Job` (its points planned), or one BadInput line naming the
fix; everything that can be known wrong before measuring, validated the same for single runs and sweeps. Parent side."""
from __future__ import annotations

import ctypes.util
import dataclasses
import functools
import math
import os
import sys

from omegaconf import DictConfig, OmegaConf

import models
from experiments.common.config import ALLOCATORS, DEFAULT_BASELINE, PRECISIONS
from experiments.common.errors import BadInput
from experiments.common.job import Job
from experiments.common.protocol import Point, Setup
from experiments.harness import external, manager


@functools.cache
def has_library(lib: str) -> bool:
    """Whether the linker finds `lib` (it runs ldconfig: once per library, not once per job)."""
    return ctypes.util.find_library(lib.removeprefix("lib").split(".so")[0]) is not None


def as_dict(cfg: DictConfig) -> dict:
    """The resolved job config as plain data, without Hydra's own node."""
    return OmegaConf.to_container(OmegaConf.masked_copy(cfg, [k for k in cfg if k != "hydra"]),
                                  resolve=True, throw_on_missing=True, enum_to_str=True)


def model_spec(cfg: dict) -> models.ModelSpec:
    keys = {k: v for k, v in cfg["model"].items() if k != "name"}
    try:
        return models.load(cfg["model"]["name"], **keys)
    except (ValueError, TypeError) as e:
        raise BadInput(str(e)) from None


# Budget keys with a stricter rule than "a finite number >= 0" (which every numeric bench key must be).
BENCH_RULES = {
    "min_samples": (lambda v: v >= 1, "at least 1"),
    "processes": (lambda v: v >= 1, "at least 1 (fresh worker processes per point)"),
    "max_time_s": (lambda v: v > 0, "positive (seconds of sampling per op)"),
    "target_rel_ci": (lambda v: 0 < v < 1, "between 0 and 1 (0.02: stop at a ±2% CI of the median)"),
    "timeout_s": (lambda v: v > 0, "positive (seconds per point, worker start and compile included)"),
}


def validate_values(cfg: dict) -> None:
    """Ranges the schema's types can't say; raises BadInput naming the fix."""
    bs = cfg["batch_size"]
    if bs is not None and bs <= 0:
        raise BadInput(f"batch_size must be a positive integer (got {bs}): use e.g. batch_size=32, "
                       "or batch_size=null for the model's batch lists")
    if cfg["repeat"] < 0:
        raise BadInput(f"repeat is a replicate index (got {cfg['repeat']}): use e.g. repeat=0,1,2")
    if not 0 <= cfg["seed"] < 2**32:
        raise BadInput(f"seed must be in [0, 2**32) (got {cfg['seed']}): use e.g. seed=0")
    if not cfg["ops"]:
        raise BadInput("ops is empty: use e.g. ops=[inference,training] (ops: inference, training, grad)")
    bench = cfg["bench"]
    for key, v in bench.items():
        test, what = BENCH_RULES.get(key, (lambda v: v >= 0, "a number >= 0"))
        if isinstance(v, (int, float)) and not isinstance(v, bool) and not (math.isfinite(v) and test(v)):
            raise BadInput(f"bench.{key} must be {what} (got {v}): use e.g. bench=quick, or bench.{key}=<value>")
    if bench["max_samples"] < bench["min_samples"]:
        raise BadInput(f"bench.max_samples ({bench['max_samples']}) is below bench.min_samples "
                       f"({bench['min_samples']}): raise it")
    mode, _, prec = cfg["report"]["baseline"].partition(" ")  # modes: jax-jit, torch-compile-cg, a runner's name
    if not mode or prec not in PRECISIONS:
        raise BadInput(f"report.baseline must be '<mode> <precision>' (got {cfg['report']['baseline']!r}): e.g. "
                       f"'{DEFAULT_BASELINE}'; precisions {', '.join(PRECISIONS)}")


def job(cfg: dict) -> Job:
    """The job, validated without starting anything; raises BadInput naming the fix."""
    validate_values(cfg)
    spec = model_spec(cfg)
    this = Job(cfg, spec, plan(cfg, spec))
    if not (os.path.isfile(this.python) and os.access(this.python, os.X_OK)):
        raise BadInput(f"runtime.python={this.python} is not an executable interpreter: give the path of a venv's "
                       "bin/python, or runtime.python=null")
    if this.framework == "external":
        try:
            external.validate(this.external_command, this.external_name, this.python)
        except ValueError as e:
            raise BadInput(str(e)) from None
    allocator = this.allocator
    if "LD_PRELOAD" in ALLOCATORS[allocator]:
        lib = ALLOCATORS[allocator]["LD_PRELOAD"]
        if not has_library(lib):
            raise BadInput(f"runtime.allocator={allocator} needs {lib}: apt-get install "
                           f"{'libjemalloc2' if allocator == 'jemalloc' else 'libtcmalloc-minimal4'}, "
                           "or runtime.allocator=glibc")
    return this


def jobs(cfgs: list[dict]) -> list[Job]:
    """Every job of a run or a sweep, validated, and each interpreter asked (all at once) whether it can measure."""
    validated = [job(c) for c in cfgs]
    asks = {ask(j) for j in validated if j.framework != "external"}
    answers = dict(zip(asks, manager.probe(list(asks))))
    for (python, fw, _, _), (problem, _) in answers.items():
        if problem and python == sys.executable:
            raise BadInput(problem)
        if problem:
            raise BadInput(f"runtime.python={python} cannot measure framework={fw} ({problem}): let `nnbench "
                           "versions PACKAGE==VERSION -- OVERRIDES` build the environment (see docs/comparing.md)")
    return [dataclasses.replace(j, fingerprint=answers[ask(j)][1]) if ask(j) in answers else j for j in validated]


def ask(job: Job) -> tuple[str, str, Setup, str]:
    """What a probe is asked: interpreter, framework, set-up and allocator (the allocator is in the fingerprint)."""
    return job.python, job.framework, job.setup, job.allocator


def plan(cfg: dict, spec: models.ModelSpec) -> tuple[Point, ...]:
    """The points of a job: one per batch size, each with the ops whose batch lists hold that size."""
    ops = tuple(dict.fromkeys(cfg["ops"]))
    if cfg["batch_size"] is not None:
        return (Point(cfg["batch_size"], ops),)
    lists = spec.batch_sizes
    sizes = sorted({b for op in ops for b in lists.get(op, ())})
    # An op without a batch list still runs at every size, so its skip reason is recorded, not lost.
    return tuple(Point(b, tuple(op for op in ops if b in lists.get(op, ()) or not lists.get(op))) for b in sizes)

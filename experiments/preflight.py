"""Everything that can be known wrong before measuring, and each job's points: one check for runs and sweeps."""
from __future__ import annotations

import ctypes.util
import dataclasses
import functools
import math
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

from omegaconf import DictConfig, OmegaConf

import models
from experiments import child, external
from experiments.config import DEFAULT_BASELINE, Precision
from experiments.protocol import Point, Request, Setup
from experiments.timing import Budget


class BadInput(Exception):
    """Input the user must fix; shown as one line, nothing is written to the store."""


def fail(message: str, code: int = 2) -> NoReturn:
    """Stop with one line on stderr (2: bad input or a store that can't be opened; 1: something was lost)."""
    print(f"nnbench: error: {message}", file=sys.stderr)
    sys.exit(code)


def first_line(e: BaseException) -> str:
    """The line of an error message that says what went wrong (for a database error: the driver's own words)."""
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    driver = [ln.split("Error) ", 1)[1] for ln in lines if re.match(r"\([\w.]+Error\) ", ln)]
    return (driver or lines or [type(e).__name__])[0][:300]


@functools.cache
def has_library(lib: str) -> bool:
    """Whether the linker finds `lib` (it runs ldconfig: once per library, not once per job)."""
    return ctypes.util.find_library(lib.removeprefix("lib").split(".so")[0]) is not None


@dataclass(frozen=True)
class Job:
    """One checked job: its resolved config as plain data, its model and its points."""

    cfg: dict
    spec: models.ModelSpec
    points: tuple[Point, ...]
    fingerprint: str | None = None  # of the measuring child's environment, as its probe reported it

    @property
    def python(self) -> str:
        """The interpreter of the measuring child."""
        return self.cfg["runtime"]["python"] or sys.executable

    @property
    def setup(self) -> Setup:
        """How the framework is set up in the child."""
        c, fw = self.cfg, self.cfg["framework"]
        return Setup(c["precision"]["name"], c["device"], c["precision"]["tf32"], fw["compile"], fw["compile_mode"],
                     fw["memory_format"] or "n/a")

    def request(self, peaks: Path | None = None) -> Request:
        """What the measuring child is asked to do; `peaks`: the sweep's cache of calibrated peaks."""
        c = self.cfg
        return Request(c["framework"]["name"], self.setup, c["model"], c["seed"], Budget.of(c["bench"]), self.points,
                       str(peaks) if peaks else None)


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


PRECISIONS = [p.value for p in Precision]
# Budget keys with a stricter rule than "a finite number >= 0" (which every numeric bench key must be).
BENCH_RULES = {
    "min_samples": (lambda v: v >= 1, "at least 1"),
    "processes": (lambda v: v >= 1, "at least 1 (fresh measuring processes per point)"),
    "max_time_s": (lambda v: v > 0, "positive (seconds of sampling per op)"),
    "target_rel_ci": (lambda v: 0 < v < 1, "between 0 and 1 (0.02: stop at a ±2% CI of the median)"),
    "timeout_s": (lambda v: v > 0, "positive (seconds per point, child start and compile included)"),
}


def check_values(cfg: dict) -> None:
    """Ranges the schema's types can't say; raises BadInput naming the fix."""
    bs = cfg["batch_size"]
    if bs is not None and bs <= 0:
        raise BadInput(f"batch_size must be a positive integer (got {bs}): use e.g. batch_size=32, "
                       "or batch_size=null for the model's seed lists")
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


def check(cfg: dict) -> Job:
    """The job, checked without starting anything; raises BadInput naming the fix."""
    check_values(cfg)
    spec = model_spec(cfg)
    job = Job(cfg, spec, plan(cfg, spec))
    if not (os.path.isfile(job.python) and os.access(job.python, os.X_OK)):
        raise BadInput(f"runtime.python={job.python} is not an executable interpreter: give the path of a venv's "
                       "bin/python, or runtime.python=null")
    if cfg["framework"]["name"] == "external":
        try:
            external.check(cfg["external"]["command"], cfg["external"]["name"])
        except ValueError as e:
            raise BadInput(str(e)) from None
    allocator = cfg["runtime"]["allocator"]
    if "LD_PRELOAD" in child.ALLOCATORS[allocator]:
        lib = child.ALLOCATORS[allocator]["LD_PRELOAD"]
        if not has_library(lib):
            raise BadInput(f"runtime.allocator={allocator} needs {lib}: apt-get install "
                           f"{'libjemalloc2' if allocator == 'jemalloc' else 'libtcmalloc-minimal4'}, "
                           "or runtime.allocator=glibc")
    return job


def jobs(cfgs: list[dict]) -> list[Job]:
    """Every job of a run or a sweep, checked, and each interpreter asked (all at once) whether it can measure."""
    checked = [check(c) for c in cfgs]
    asks = {ask(j) for j in checked if j.cfg["framework"]["name"] != "external"}
    answers = dict(zip(asks, probe(list(asks))))
    for (python, fw, _, _), (problem, _) in answers.items():
        if problem and python == sys.executable:
            raise BadInput(problem)
        if problem:
            raise BadInput(f"runtime.python={python} cannot measure framework={fw} ({problem}): build that "
                           "environment with `python -m experiments.venv DIR PACKAGE==VERSION ...` (see README)")
    return [dataclasses.replace(j, fingerprint=answers[ask(j)][1]) if ask(j) in answers else j for j in checked]


def ask(job: Job) -> tuple[str, str, Setup, str]:
    """What a probe is asked: interpreter, framework, set-up and allocator (the allocator is in the fingerprint)."""
    return job.python, job.cfg["framework"]["name"], job.setup, job.cfg["runtime"]["allocator"]


def probe(asks: list[tuple[str, str, Setup, str]]) -> list[tuple[str | None, str | None]]:
    """Ask children, in parallel, whether each (python, framework, set-up, allocator) works: (None, fingerprint)
    where it does, (the problem, None) where it doesn't."""
    procs = [subprocess.Popen([python, "-m", "experiments.worker", "--probe", fw, setup.to_json()], cwd=child.ROOT,
                              env=child.env(allocator), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for python, fw, setup, allocator in asks]
    out = []
    for p in procs:
        stdout, stderr = p.communicate()
        lines = stdout.strip().splitlines()
        if p.returncode == 0:
            out.append((None, lines[1] if len(lines) > 1 else None))  # an interpreter of old may print the device only
        else:
            out.append((stdout.strip() or (stderr.strip().splitlines() or [f"probe exited with {p.returncode}"])[-1],
                        None))
    return out


def plan(cfg: dict, spec: models.ModelSpec) -> tuple[Point, ...]:
    """The points of a job: one per batch size, each with the ops that the seed measures at that size."""
    ops = tuple(dict.fromkeys(cfg["ops"]))
    if cfg["batch_size"] is not None:
        return (Point(cfg["batch_size"], ops),)
    lists = spec.batch_sizes
    sizes = sorted({b for op in ops for b in lists.get(op, ())})
    # An op without seed sizes still runs at every size, so its skip reason is recorded, not lost.
    return tuple(Point(b, tuple(op for op in ops if b in lists.get(op, ()) or not lists.get(op))) for b in sizes)

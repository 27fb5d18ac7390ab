"""Everything that can be known wrong before measuring, and each job's points: one check for runs and sweeps."""
from __future__ import annotations

import ctypes.util
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

import models
from experiments import child, external
from experiments.protocol import Point, Request, Setup
from experiments.timing import Budget


class BadInput(Exception):
    """Input the user must fix; shown as one line, nothing is written to the store."""


@dataclass(frozen=True)
class Job:
    """One checked job: its resolved config as plain data, its model and its points."""

    cfg: dict
    spec: models.ModelSpec
    points: tuple[Point, ...]

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


def check(cfg: dict) -> Job:
    """The job, checked without starting anything; raises BadInput naming the fix."""
    spec = model_spec(cfg)
    job = Job(cfg, spec, plan(cfg, spec))
    if not (os.path.isfile(job.python) and os.access(job.python, os.X_OK)):
        raise BadInput(f"runtime.python={job.python} is not an executable interpreter: give the path of a venv's "
                       "bin/python, or runtime.python=null")
    bs = cfg["batch_size"]
    if bs is not None and bs <= 0:
        raise BadInput(f"batch_size must be a positive integer (got {bs}): use e.g. batch_size=32, "
                       "or batch_size=null for the model's seed lists")
    if cfg["repeat"] < 0:
        raise BadInput(f"repeat is a replicate index (got {cfg['repeat']}): use e.g. repeat=0,1,2")
    if not cfg["ops"]:
        raise BadInput("ops is empty: use e.g. ops=[inference,training] (ops: inference, training, grad)")
    if cfg["framework"]["name"] == "external":
        try:
            external.check(cfg["external"]["command"], cfg["external"]["name"])
        except ValueError as e:
            raise BadInput(str(e)) from None
    allocator = cfg["runtime"]["allocator"]
    if "LD_PRELOAD" in child.ALLOCATORS[allocator]:
        lib = child.ALLOCATORS[allocator]["LD_PRELOAD"]
        if not ctypes.util.find_library(lib.removeprefix("lib").split(".so")[0]):
            raise BadInput(f"runtime.allocator={allocator} needs {lib}: apt-get install "
                           f"{'libjemalloc2' if allocator == 'jemalloc' else 'libtcmalloc-minimal4'}, "
                           "or runtime.allocator=glibc")
    return job


def jobs(cfgs: list[dict]) -> list[Job]:
    """Every job of a run or a sweep, checked, and each interpreter asked (all at once) whether it can measure."""
    checked = [check(c) for c in cfgs]
    asks = {(j.python, j.cfg["framework"]["name"], j.setup) for j in checked if j.cfg["framework"]["name"] != "external"}
    problems = dict(zip(asks, probe(list(asks))))
    for (python, fw, _), problem in problems.items():
        if problem and python == sys.executable:
            raise BadInput(problem)
        if problem:
            raise BadInput(f"runtime.python={python} cannot measure framework={fw} ({problem}): build that "
                           "environment with `python -m experiments.venv DIR PACKAGE==VERSION ...` (see README)")
    return checked


def probe(asks: list[tuple[str, str, Setup]]) -> list[str | None]:
    """Ask children, in parallel, whether each (python, framework, set-up) works; None where it does."""
    procs = [subprocess.Popen([python, "-m", "experiments.worker", "--probe", fw, setup.to_json()], cwd=child.ROOT,
                              env=child.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for python, fw, setup in asks]
    out = []
    for p in procs:
        stdout, stderr = p.communicate()
        last = (stderr.strip().splitlines() or [f"probe exited with {p.returncode}"])[-1]
        out.append(None if p.returncode == 0 else stdout.strip() or last)
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

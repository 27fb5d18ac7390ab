"""What a job's points say about their model beyond their timings: where its code comes from, whether the two
frameworks were shown to compute the same function (`parity`), where its FLOPs come from and its parameter count
per framework. The parity check and a user's network's FLOP count run in one process of their own
(`python -m experiments.measure.parity`), once per sweep for each model, keys and points, its answer cached in the
sweep's dir for every job that measures the same model. Parent side."""
from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import json
import logging
import os
import subprocess
from pathlib import Path

from experiments.common.config import EXTERNAL
from experiments.common.errors import first_line
from experiments.common.frameworks import param_counts
from experiments.common.job import Job
from experiments.measure.flops import source as flops_source
from experiments.measure.parity import SIDES, Parity, Proof
from experiments.measure.parity import check as parity_check
from models import Model, ModelSpec, Network

log = logging.getLogger("nnbench")
PROOFS = "parity"  # in the sweep's dir: one <key>.json per model, keys and points
# The parity process compares and counts on the CPU; jax would otherwise open every platform it has: a TPU chip
# that a worker holds (only one process may) would stop it, or it would take the chip from the next worker.
HELPER = {"JAX_PLATFORMS": "cpu"}


def sides(spec: Model) -> dict[str, int]:
    """Trainable parameters as each framework counts them (the layer DSL's are one count for both)."""
    return param_counts(spec) if isinstance(spec, Network) else dict.fromkeys(SIDES, spec.param_count())


def source_tags(spec: Model) -> dict[str, str]:
    """A user's network's origin: `model_source` (a file's path, a package and its entry point) and
    `model_source_version` (the file's sha256, the package's version), also in each point's resume key."""
    if not isinstance(spec, Network) or spec.source is None:
        return {}
    return {"model_source": f"{spec.source.kind} {spec.source.where}", "model_source_version": spec.source.version}


def checkable(spec: Model) -> bool:
    """Whether both frameworks can be given the same weights: the layer DSL's canonical ones, or a weight map."""
    return isinstance(spec, ModelSpec) or (spec.torch is not None and spec.flax is not None
                                           and spec.weights is not None)


def uncounted(spec: Model) -> bool:
    """A user's network without its own FLOP count: one framework counts it for both."""
    return isinstance(spec, Network) and spec.flops is None


def checks(job: Job) -> bool:
    """Whether the job's model is checked: parity=true, and nnbench's jax and torch measure it (a runner times its
    own code)."""
    return job.config.parity and job.config.framework.name != EXTERNAL


def alone(job: Job) -> bool:
    """Whether the job's sweep measures its model with one framework only: nothing to compare it with."""
    return bool(job.frameworks) and not set(SIDES) <= set(job.frameworks)


def compares(job: Job) -> bool:
    """Whether the parity process compares the frameworks (else it only counts a network's FLOPs)."""
    return checks(job) and checkable(job.spec) and not alone(job)


def measured_with(configs: list[dict], model: dict) -> tuple[str, ...]:
    """The frameworks a sweep's jobs (their configs as logged) measure a model with."""
    return tuple(sorted({str(c["framework"]["name"]) for c in configs if c.get("model") == model}))


def key(job: Job) -> str:
    what = {"model": dict(job.config.model), "source": source_tags(job.spec), "parity": compares(job),
            "points": sorted({f"{op}:{p.batch_size}" for p in job.points for op in p.ops})}
    return hashlib.sha256(json.dumps(what, sort_keys=True, default=str).encode()).hexdigest()[:16]


def ask(job: Job, timeout_s: float) -> tuple[Proof, bool]:
    """One parity process for the job's model and points (it imports the frameworks: never in this process), and
    whether it answered (a process that was killed, or ran out of time, is not kept for the next job)."""
    points = sorted({f"{op}:{p.batch_size}" for p in job.points for op in p.ops})
    flops_only = [] if compares(job) else ["--flops-only"]
    cmd = [job.python, "-m", "experiments.measure.parity", *flops_only, json.dumps(dict(job.config.model)), *points]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=os.environ | HELPER)
    except subprocess.TimeoutExpired:
        why = f"the parity check ran past {timeout_s:.0f} s (bench.timeout_s)"
        return Proof(Parity("failed", reason=why), []), False
    lines = r.stdout.strip().splitlines()
    if r.returncode != 0 or not lines:
        tail = (r.stderr.strip().splitlines() or ["no output"])[-1][:300]
        why = f"the parity check's process exited {r.returncode}: {tail}"
        return Proof(Parity("failed", reason=why), []), False
    return Proof.from_json(lines[-1]), True


def proof(job: Job, directory: Path) -> Proof:
    """The cached answer for the job's model and points, or a fresh one (a lock: one process per sweep, even when
    a launcher runs the jobs of one model at once)."""
    path = directory / PROOFS / f"{key(job)}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if path.exists():
            return Proof.from_json(path.read_text())
        what = [w for w, needs in (("checking that jax and torch compute the same function", compares(job)),
                                   ("counting its FLOPs", uncounted(job.spec))) if needs]
        log.info("%s: %s, in a process of its own", job.spec.name or job.config.model["name"], " and ".join(what))
        got, answered = ask(job, job.config.bench.timeout_s)
        if answered:
            path.write_text(got.to_json())
        return got


def tagged(job: Job, directory: Path) -> Job:
    """The job with its model's tags and, for a network the worker can't count, its FLOPs per op and batch."""
    spec, check = job.spec, checks(job)
    if spec is None or not job.points:  # an external runner's model; or nothing left to measure
        return job
    got = None
    if compares(job) or uncounted(spec):
        try:
            got = proof(job, directory)
        except OSError as e:  # the sweep's dir: its points are still measured, their parity unchecked
            got = Proof(Parity("unchecked", reason=f"the parity check's answer could not be kept: {first_line(e)}"), [])
    unchecked = "framework=external: the runner's own code, not checked" if job.config.parity \
        else "parity=false: not checked"
    if alone(job):
        unchecked = f"only {' and '.join(job.frameworks)} measures it in this sweep: nothing to compare it with"
    parity = Parity("unchecked", reason=unchecked) if not check or alone(job) \
        else got.parity if compares(job) else parity_check(spec)  # unchecked at once, with the reason
    counts = sides(spec)
    tags = source_tags(spec) | {"parity": parity.status, "flops_source": flops_source(spec),
                                **{f"param_count_{fw}": str(n) for fw, n in counts.items()},
                                "param_counts_differ": str(len(set(counts.values())) > 1).lower()}
    if parity.status != "ok":
        tags["parity_reason"] = parity.reason[:1000]
    if parity.worst is not None:
        tags["parity_worst"] = f"{parity.worst:.3g} ({parity.where})"
    if parity.batch is not None:
        tags["parity_batch"] = str(parity.batch)
    flops = {f"{c.op}:{c.batch}": c.flops for c in (got.flops if got else []) if c.flops is not None}
    return dataclasses.replace(job, tags=tags, flops=flops)

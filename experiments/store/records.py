"""A point's record: what lands in MLflow for it (name, params, metrics, tags, artifacts), as plain data flattened
from the job and the point's reading (`measure.reading`, where it was judged), saved in the point's dir before it is
logged. Parent side."""
from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from experiments.common.columns import PARAMS
from experiments.common.config import logged
from experiments.common.job import Job
from experiments.common.protocol import Point, PointResult
from experiments.measure.environment import fingerprint, spec_versions, suite_record
from experiments.measure.reading import Reading

# MLflow statuses mean what MLflow means: a skipped point (an op the model doesn't have) ran to its end, KILLED is a
# person's interrupt, FAILED a fault. The tag `outcome` tells finished from skipped.
STATUS = {"ok": "FINISHED", "skipped": "FINISHED", "failed": "FAILED", "interrupted": "KILLED"}
REASON_CHARS = 4000  # well under MLflow's tag value limit
NOTE = "mlflow.note.content"  # a run's description, which the MLflow UI renders as Markdown
META = "record.json"
# The layout of what a point's run holds, tagged on every run (FORMAT_TAG) so that a store written by an older
# nnbench is read as this one writes (store.tracking.upgraded). 2: machine numbers and the parameter count are
# metrics, a skipped point is FINISHED. Runs without the tag were written before it existed (format 1: machine
# numbers as tags, a skipped point KILLED; or already format 2).
FORMAT, FORMAT_TAG = 2, "nnbench.format"
PROFILE = "profile"  # a point's profile files: profile/<op>/ in its dir and among its run's artifacts


@dataclass
class Record:
    run_name: str
    slug: str
    outcome: str  # ok | skipped | failed | interrupted
    params: dict[str, str]
    metrics: dict[str, float]
    tags: dict[str, str]
    config: dict = field(default_factory=dict)  # the resolved job config, as logged (common.config.logged)
    samples: dict[str, dict] = field(default_factory=dict)  # op -> every sample, block, stop reason, device
    stderr: str = ""  # the worker's last output, for a failed point

    @property
    def status(self) -> str:
        return STATUS[self.outcome]

    def save(self, directory: Path) -> None:
        """The run's artifacts and record.json: everything `load` and `tracking.Store.log_record` need."""
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "config.yaml").write_text(yaml.safe_dump(self.config, sort_keys=False))
        (directory / "environment.json").write_text(json.dumps(self.tags, indent=1, sort_keys=True))
        if self.samples:
            (directory / "samples.json").write_text(json.dumps(self.samples))
        if self.stderr:
            (directory / "stderr.txt").write_text(self.stderr)
        meta = {k: v for k, v in dataclasses.asdict(self).items() if k not in ("config", "samples", "stderr")}
        (directory / META).write_text(json.dumps(meta, indent=1))

    @classmethod
    def load(cls, directory: Path) -> "Record":
        def read(name: str, parse, default):
            path = directory / name
            return parse(path.read_text()) if path.exists() else default

        return cls(**json.loads((directory / META).read_text()), config=read("config.yaml", yaml.safe_load, {}),
                   samples=read("samples.json", json.loads, {}), stderr=read("stderr.txt", str, ""))


def flatten(d: dict, prefix: str = "") -> dict[str, str]:
    out: dict[str, str] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten(v, key + "."))
        else:
            out[key] = json.dumps(v) if isinstance(v, list) else str(v)
    return out


def build(job: Job, reading: Reading) -> Record:
    """The point's record: its reading flattened for MLflow. Its params are the job's (with the config as `config.*`
    and an environment's package versions), its metrics `<op>_<name>` and the run's own numbers, its tags identity,
    flags and reasons; a failed point keeps its samples and tags, but no per-op metric."""
    c, config, point, env = job.config, logged(job.config), reading.point, reading.environment
    model, prec, run_mode, bs = model_name(job), str(c.precision.name), job.mode, point.batch_size
    params = {
        "framework": str(c.framework.name), "compile": str(c.framework.compile).lower(), "mode": run_mode,
        "model": model, "precision": prec, "batch_size": str(bs), "device": reading.device,
        "device_requested": str(c.device), "ops": ",".join(point.ops),
        "param_count": str(job.spec.param_count() if job.spec else 0),
        "repeat": str(c.repeat), "memory_format": str(c.framework.memory_format or "n/a"),
        "sync": env.get("sync_policy", "n/a"),  # synced or pipelined, as the worker resolved bench.sync
    }
    assert tuple(params) == PARAMS
    params |= flatten(config, "config.") | spec_versions(env)  # an environment of `nnbench versions`: its versions
    tags = {**env, **suite_record(), "env_fingerprint": fingerprint(env) if env else "n/a",
            "point_key": point_key(job, point), FORMAT_TAG: str(FORMAT)} | job.tags | judged(reading)
    measured = reading.outcome in ("ok", "skipped")
    metrics = op_metrics(reading) if measured else {}
    metrics |= {"param_count": float(params["param_count"])} | reading.machine
    spec = f" · {env['env_spec']}" if "env_spec" in env else ""  # an environment of `nnbench versions`
    rec = Record(run_name=run_name(job, point) + spec, slug=f"{model}-{run_mode}-{prec}-bs{bs}",
                 outcome=reading.outcome, params=params, metrics=metrics, tags=tags, config=config,
                 samples=samples(reading), stderr=reading.stderr_tail if reading.failure is not None else "")
    rec.tags[NOTE] = describe(rec.run_name, reading)
    return rec


def judged(r: Reading) -> dict[str, str]:
    """The reading's verdicts as tags: skip reasons, the flags with the hint, why it failed, its outcome."""
    tags = {f"skip_reason_{op}": why[:REASON_CHARS] for op, why in r.skipped.items()}
    tags |= {f"unmeasured_reason_{op}": u.reason[:REASON_CHARS] for op, u in r.unmeasured.items()}
    if r.ops or r.unmeasured:
        tags |= {"noisy": str(r.noisy).lower(), "unstable": str(bool(r.unstable)).lower(),
                 "oversubscribed": str(bool(r.oversubscribed)).lower()}
        tags |= {"unstable_ops": ",".join(r.unstable), "unstable_hint": r.hint} if r.unstable else {}
        tags |= {f"oversubscribed_{op}": why[:REASON_CHARS] for op, why in r.oversubscribed.items()}
    if r.replaced:
        tags["remeasured"] = "; ".join(f"process {x.process}: {x.reason}" for x in r.replaced)[:REASON_CHARS]
    tags |= paired_tags(r) | ({"peak_source": r.peak.source[:REASON_CHARS]} if r.peak else {})
    if r.interrupted:
        tags["failure_reason"] = r.interrupted
    elif r.failure is not None:
        tags["failure_reason"] = f"{r.failure}\n{r.stderr_tail}"[-REASON_CHARS:]
    return tags | {"outcome": r.outcome}


def paired_tags(r: Reading) -> dict[str, str]:
    """How the point was compared: `design` paired or unpaired; paired, how its variants took turns
    (`paired_design`), the baseline it was compared with (or `paired_baseline=true`), each op's verdict, and what
    differs from the baseline besides the variant."""
    if r.paired is None:
        return {"design": "unpaired"} if r.ops else {}
    tags = {"design": "paired", "paired_design": r.paired.design, "variant": r.paired.label,
            "compared_with": r.paired.baseline}
    if r.paired.is_baseline:
        return tags | {"paired_baseline": "true"}
    tags |= {f"{op}_verdict": str(c.verdict) for op, c in r.paired.ops.items()}
    tags |= {f"{op}_repro": line[:REASON_CHARS] for op, line in r.paired.repro.items()}
    return tags | {"differs": "; ".join(r.paired.differs) or "nothing else"}


def paired_metrics(r: Reading) -> dict[str, float]:
    """Per op compared paired, its judgement's numbers (`PairedComparison.numbers`: the speedup over the baseline, its
    interval, p- and q-value, the trials, the look's level, the spread) as `<op>_<name>`."""
    return {f"{op}_{k}": v for op, c in (r.paired.ops.items() if r.paired else ()) for k, v in c.numbers().items()}


def op_metrics(r: Reading) -> dict[str, float]:
    """`<op>_<name>` for every number of every measured op (an unmeasured one's without its time), its paired
    speedup, and the peak (beside a data sheet's, the matmul rate measured there)."""
    out = {f"{op}_{k}": v for op, o in [*r.ops.items(), *r.unmeasured.items()] for k, v in o.metrics().items()}
    peak = {"peak_tflops": r.peak.tflops} | ({"peak_measured_tflops": r.peak.measured} if r.peak.measured else {}) \
        if r.peak else {}
    return out | paired_metrics(r) | peak


def samples(r: Reading) -> dict[str, dict]:
    """samples.json: per op every sample, pooled and per process, with the block, stop reason and device; the
    processes measured again (`replaced`, each with its number and reason) and an unmeasured op's processes too."""
    out = {}
    for op, o, why in [(op, o, None) for op, o in r.ops.items()] + [(op, u.op, u.reason) for op, u in
                                                                     r.unmeasured.items()]:
        runs = [dataclasses.asdict(m) for m in o.measurements]
        out[op] = {"samples_s": [t for run in runs for t in run["samples_s"]], "block": runs[0]["block"],
                   "stop_reason": runs[0]["stop_reason"], "elapsed_s": sum(run["elapsed_s"] for run in runs),
                   "device": o.result.device, "processes": runs} | ({"unmeasured": why} if why else {})
    for x in r.replaced:
        for op, o in x.result.ops.items():
            if op in out and o.measurement is not None:
                out[op].setdefault("replaced", []).append(
                    {"process": x.process, "reason": x.reason} | dataclasses.asdict(o.measurement))
    return out


# Config keys left out of a point's identity: bookkeeping, and how the job chose its points (the point says which)
NOT_THE_POINT = ("mlflow", "report", "resume", "batch_size", "ops", "parity")


def point_key(job: Job, point: Point) -> str:
    """What identifies a measured point, for `resume`: its config (bookkeeping left out), batch size and ops, and
    a user's network's source (editing its file measures it again)."""
    what = {k: v for k, v in logged(job.config).items() if k not in NOT_THE_POINT}
    what["point"] = dataclasses.asdict(point)
    source = getattr(job.spec, "source", None)  # a user's network: its file's hash or its package's version
    if source is not None:
        what["source"] = source.version
    return hashlib.sha256(json.dumps(what, sort_keys=True, default=str).encode()).hexdigest()[:16]


def model_name(job: Job) -> str:
    """The model's name: model=file's is its file's stem (mynet.py: mynet), so two files in a sweep stay apart."""
    return getattr(job.spec, "name", "") or job.config.model["name"]


def run_name(job: Job, point: Point) -> str:
    """`lenet · jax-jit · fp32 · bs32`, and the replicate from repeat=1 on."""
    c = job.config
    rep = f" · r{c.repeat}" if c.repeat else ""
    return f"{model_name(job)} · {job.mode} · {c.precision.name} · bs{point.batch_size}{rep}"


def describe(name: str, r: Reading) -> str:
    """The run's one-line description: what was measured, the median and the interval (or why there is none)."""
    if r.interrupted:
        return f"INTERRUPTED: {r.interrupted}"
    if r.failure is not None:
        return f"FAILED: {r.failure.splitlines()[0]}"
    if not r.ops and not r.unmeasured:
        return "skipped: " + "; ".join(f"{op} {why}" for op, why in r.skipped.items())
    processes = r.processes
    ops = [f"{op} {o.stats.median_s * 1e3:.4g} ms [{o.stats.ci95_low_s * 1e3:.4g}, {o.stats.ci95_high_s * 1e3:.4g}]"
           for op, o in r.ops.items()] + [f"{op} unmeasured ({u.reason})" for op, u in r.unmeasured.items()]
    flags = [flag.upper() for flag, on in (("noisy", r.noisy), ("unstable", bool(r.unstable)),
                                           ("oversubscribed", bool(r.oversubscribed)),
                                           ("remeasured", bool(r.replaced))) if on]
    per = "median per call (pipelined: one sync per block)" if r.environment.get("sync_policy") == "pipelined" \
        else "median per call"
    return (f"{name} on {r.device}: " + "; ".join(ops) + f" ({per} and the 95% interval of a re-run, "
            f"{processes} process{'es' if processes > 1 else ''})" + (f" {', '.join(flags)}" if flags else ""))


def add_profile(rec: Record, reading: Reading, result: PointResult, files: Path, directory: Path) -> Record:
    """The record with its profile added, and nothing it had changed: per op the metrics `<op>_time_<part>_s`,
    `<op>_profile_wall_s` (and its ratio to the timed median of its `reading`), the tag `profile` and the files, moved
    to profile/<op>/. `result` is the profiling worker's line for the point; `files` the folder it wrote them to."""
    if result.failure is not None:
        return without_profile(rec, "failed", f"{result.failure}\n{result.stderr_tail}")
    metrics, tags = dict(rec.metrics), dict(rec.tags) | {"profile": "ok"}
    for op, r in result.ops.items():
        if r.status != "ok" or r.profile is None:
            tags[f"profile_skip_reason_{op}"] = r.reason[:REASON_CHARS]
            continue
        added = {f"{op}_{k}": v for k, v in r.metrics().items()}
        added[f"{op}_profile_wall_ratio"] = r.profile.wall_s / reading.ops[op].stats.median_s
        assert not added.keys() & metrics.keys(), "a profile never replaces a timing"
        metrics |= added
        (directory / PROFILE).mkdir(parents=True, exist_ok=True)
        shutil.rmtree(directory / PROFILE / op, ignore_errors=True)
        shutil.move(files / op, directory / PROFILE / op)  # the worker's scratch copy is not kept twice
    return dataclasses.replace(rec, metrics=metrics, tags=tags)


def without_profile(rec: Record, status: str, reason: str) -> Record:
    """The record with the tags that say why it has no profile: failed, interrupted, or unavailable."""
    return dataclasses.replace(rec, tags=rec.tags | {"profile": status, "profile_reason": reason[-REASON_CHARS:]})

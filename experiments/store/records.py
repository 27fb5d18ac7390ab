"""A point's record: what lands in MLflow for it (name, params, metrics, tags, artifacts), as plain data built from
the job and its workers' results, saved in the point's dir before it is logged. Parent side."""
from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
import statistics
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from experiments.common.job import Job
from experiments.common.protocol import OpResult, Point, PointResult, metric_fields
from experiments.measure.environment import fingerprint, suite_record
from experiments.measure.flops import achieved_tflops
from experiments.measure.peaks import vendor_tflops
from experiments.measure.stats import summarize

STATUS = {"ok": "FINISHED", "skipped": "KILLED", "failed": "FAILED", "interrupted": "KILLED"}
REASON_CHARS = 4000  # well under MLflow's tag value limit
# The params of every point run, besides the flattened config; compare and report select and group by them.
PARAMS = ("framework", "compile", "mode", "model", "precision", "batch_size", "device", "device_requested", "ops",
          "param_count", "repeat", "memory_format")
# Other processes' CPU use while sampling above which a point is tagged noisy=true: on 2 cores, another busy
# process made torch's OpenMP threads wait on each other (a 0.3 ms MLP inference read at tens of ms).
NOISY_CORES = 0.2
DERIVED = ("achieved_tflops", "mfu", "mfu_vendor")  # per op, from flops, the median and the peaks
META = "record.json"
PROFILE = "profile"  # a point's profile files: profile/<op>/ in its dir and among its run's artifacts


@dataclass
class Record:
    run_name: str
    slug: str
    outcome: str  # ok | skipped | failed
    params: dict[str, str]
    metrics: dict[str, float]
    tags: dict[str, str]
    config: dict = field(default_factory=dict)  # the resolved job config
    samples: dict[str, dict] = field(default_factory=dict)  # op -> every sample, block, stop reason, device
    stderr: str = ""  # the worker's last output, for a failed point

    @property
    def status(self) -> str:
        return STATUS[self.outcome]

    def save(self, directory: Path) -> None:
        """The run's artifacts and record.json: everything `load` and `tracking.log_record` need."""
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


def build(job: Job, point: Point, results: list[PointResult]) -> Record:
    """point: its batch size and ops; results: the point as each worker process reported it (or why it could not).
    A failure in any process fails the point; its samples are kept."""
    model, prec, run_mode, bs = job.model, job.precision, job.mode, point.batch_size
    ok = [r for r in results if r.failure is None]
    params = {
        "framework": job.framework, "compile": str(job.compile).lower(), "mode": run_mode, "model": model,
        "precision": prec, "batch_size": str(bs), "device": ok[0].device if ok else "n/a",
        "device_requested": job.device, "ops": ",".join(point.ops),
        "param_count": str(job.spec.param_count() if job.spec else 0),
        "repeat": str(job.repeat), "memory_format": job.memory_format or "n/a",
    }
    assert tuple(params) == PARAMS
    params |= flatten(job.cfg, "config.")
    env = ok[0].environment if ok else {}
    tags = {**env, **suite_record(), "env_fingerprint": fingerprint(env) if env else "n/a",
            "point_key": point_key(job, point)}
    metrics, samples = measured(point, ok, tags)
    failed = [r for r in results if r.failure is not None]
    if failed:
        outcome, metrics = "failed", {}
        which = f" (process {results.index(failed[0]) + 1} of {len(results)})" if len(results) > 1 else ""
        tags["failure_reason"] = f"{failed[0].failure}{which}\n{failed[0].stderr_tail}"[-REASON_CHARS:]
    else:
        outcome = "ok" if samples else "skipped"
    tags["outcome"] = outcome
    return Record(run_name=run_name(job, point), slug=f"{model}-{run_mode}-{prec}-bs{bs}", outcome=outcome,
                  params=params, metrics=metrics, tags=tags, config=job.cfg, samples=samples,
                  stderr=failed[0].stderr_tail if failed else "")


# Config keys left out of a point's identity: bookkeeping, and how the job chose its points (the point says which)
NOT_THE_POINT = ("mlflow", "report", "resume", "batch_size", "ops")


def point_key(job: Job, point: Point) -> str:
    """What identifies a measured point, for `resume`: its config (bookkeeping left out), batch size and ops."""
    what = {k: v for k, v in job.cfg.items() if k not in NOT_THE_POINT} | {"point": dataclasses.asdict(point)}
    return hashlib.sha256(json.dumps(what, sort_keys=True, default=str).encode()).hexdigest()[:16]


def run_name(job: Job, point: Point) -> str:
    """`lenet · jax-jit · fp32 · bs32`, and the replicate from repeat=1 on."""
    rep = f" · r{job.repeat}" if job.repeat else ""
    return f"{job.model} · {job.mode} · {job.precision} · bs{point.batch_size}{rep}"


def measured(point: Point, results: list[PointResult], tags: dict[str, str]) -> tuple[dict, dict]:
    """Metrics and samples of the ops the processes measured; skip reasons and the noisy flag go to `tags`."""
    metrics: dict[str, float] = {}
    samples: dict[str, dict] = {}
    peak = statistics.median(r.peak_tflops for r in results) if results and results[0].peak_tflops else None
    vendor = vendor_tflops(tags.get("device_name", ""), tags.get("precision_policy", ""))
    for op in point.ops if results else ():
        rs = [r.ops[op] for r in results]
        if rs[0].status != "ok":
            tags[f"skip_reason_{op}"] = rs[0].reason[:REASON_CHARS]
            continue
        m = merge(rs, point.batch_size).metrics()
        if "flops" in m:
            m["achieved_tflops"] = achieved_tflops(m["flops"], m["median_s"])
            m |= {"mfu": m["achieved_tflops"] / peak} if peak else {}
            m |= {"mfu_vendor": m["achieved_tflops"] / vendor} if vendor else {}
        metrics |= {f"{op}_{k}": v for k, v in m.items()}
        runs = [dataclasses.asdict(r.measurement) for r in rs]
        samples[op] = {"samples_s": [t for r in runs for t in r["samples_s"]], "block": runs[0]["block"],
                       "stop_reason": runs[0]["stop_reason"], "elapsed_s": sum(r["elapsed_s"] for r in runs),
                       "device": rs[0].device, "processes": runs}
    if peak:
        metrics["peak_tflops"] = peak
    if samples:
        tags["noisy"] = str(max_background_cores(metrics) > NOISY_CORES).lower()
    return metrics, samples


def max_background_cores(metrics: dict[str, float]) -> float:
    """The most cores other processes used while any op of the point was measured."""
    return max((v for k, v in metrics.items() if k.endswith("_background_cores")), default=0.0)


def merge(results: list[OpResult], batch: int) -> OpResult:
    """One op over a point's worker processes: statistics of all their samples, each metric combined."""
    first = results[0]
    if len(results) == 1 or first.status != "ok":
        return first
    merged = {f.name: f.metadata["combine"]([getattr(r, f.name) for r in results])
              for f in metric_fields() if all(getattr(r, f.name) is not None for r in results)}
    return OpResult("ok", device=first.device, stats=summarize([r.measurement for r in results], batch), **merged)


def add_profile(rec: Record, result: PointResult, files: Path, directory: Path) -> Record:
    """The record with its profile added, and nothing it had changed: per op the metrics `<op>_time_<part>_s`,
    `<op>_profile_wall_s` (and its ratio to the timed median), the tag `profile` and the files, moved to
    profile/<op>/. `result` is the profiling worker's line for the point; `files` the folder it wrote them to."""
    if result.failure is not None:
        return without_profile(rec, "failed", f"{result.failure}\n{result.stderr_tail}")
    metrics, tags = dict(rec.metrics), dict(rec.tags) | {"profile": "ok"}
    for op, r in result.ops.items():
        if r.status != "ok" or r.profile is None:
            tags[f"profile_skip_reason_{op}"] = r.reason[:REASON_CHARS]
            continue
        added = {f"{op}_{k}": v for k, v in r.metrics().items()}
        added[f"{op}_profile_wall_ratio"] = r.profile.wall_s / rec.metrics[f"{op}_median_s"]
        assert not added.keys() & metrics.keys(), "a profile never replaces a timing"
        metrics |= added
        (directory / PROFILE).mkdir(parents=True, exist_ok=True)
        shutil.rmtree(directory / PROFILE / op, ignore_errors=True)
        shutil.move(files / op, directory / PROFILE / op)  # the worker's scratch copy is not kept twice
    return dataclasses.replace(rec, metrics=metrics, tags=tags)


def without_profile(rec: Record, status: str, reason: str) -> Record:
    """The record with the tags that say why it has no profile: failed, interrupted, or unavailable."""
    return dataclasses.replace(rec, tags=rec.tags | {"profile": status, "profile_reason": reason[-REASON_CHARS:]})

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
from experiments.measure.environment import fingerprint, spec_versions, suite_record
from experiments.measure.flops import achieved_tflops
from experiments.measure.machine import MachineCheck
from experiments.measure.peaks import vendor_tflops
from experiments.measure.stats import summarize

# MLflow statuses mean what MLflow means: a skipped point (an op the model doesn't have) ran to its end, KILLED is a
# person's interrupt, FAILED a fault. The tag `outcome` tells finished from skipped.
STATUS = {"ok": "FINISHED", "skipped": "FINISHED", "failed": "FAILED", "interrupted": "KILLED"}
REASON_CHARS = 4000  # well under MLflow's tag value limit
# The params of every point run, besides the flattened config; compare and report select and group by them.
PARAMS = ("framework", "compile", "mode", "model", "precision", "batch_size", "device", "device_requested", "ops",
          "param_count", "repeat", "memory_format")
# Other processes' CPU use while sampling above which a point is tagged noisy=true: on 2 cores, another busy
# process made torch's OpenMP threads wait on each other (a 0.3 ms MLP inference read at tens of ms).
NOISY_CORES = 0.2
# An op is flagged unstable=true when a re-run could read far from this one: its re-run interval spans more than
# UNSTABLE_INTERVAL (high / low: a re-run may read over 1.7× away), or its processes' medians differ by more than
# UNSTABLE_SPREAD (slowest / fastest). Chosen so the flag separates: on a 2-core VM whose intervals are typically
# ×2 wide, it marked 1 of the README sweep's 8 points and 24 of seed 000's 100; ×1.5 marked nearly all of them.
UNSTABLE_INTERVAL = 3.0
UNSTABLE_SPREAD = 2.0
NOTE = "mlflow.note.content"  # a run's description, which the MLflow UI renders as Markdown
DERIVED = ("achieved_tflops", "mfu", "mfu_vendor")  # per op, from flops, the median and the peaks
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


def build(job: Job, point: Point, results: list[PointResult], machine: MachineCheck | None = None) -> Record:
    """point: its batch size and ops; results: the point as each worker process reported it (or why it could not).
    A failure in any process fails the point; its samples are kept. `machine`: the sweep's machine check, for the
    hint of an unstable point."""
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
    params |= spec_versions(env)  # an environment of `nnbench versions`: its packages' versions, as params too
    tags = {**env, **suite_record(), "env_fingerprint": fingerprint(env) if env else "n/a",
            "point_key": point_key(job, point)}
    metrics, samples = measured(point, ok, tags, machine)
    failed = [r for r in results if r.failure is not None]
    if failed:
        outcome, metrics = "failed", {}
        which = f" (process {results.index(failed[0]) + 1} of {len(results)})" if len(results) > 1 else ""
        tags["failure_reason"] = f"{failed[0].failure}{which}\n{failed[0].stderr_tail}"[-REASON_CHARS:]
    else:
        outcome = "ok" if samples else "skipped"
    tags["outcome"], tags[FORMAT_TAG] = outcome, str(FORMAT)
    metrics |= {"param_count": float(params["param_count"])} | machine_numbers(ok)
    spec = f" · {env['env_spec']}" if "env_spec" in env else ""  # an environment of `nnbench versions`
    rec = Record(run_name=run_name(job, point) + spec, slug=f"{model}-{run_mode}-{prec}-bs{bs}", outcome=outcome,
                 params=params, metrics=metrics, tags=tags, config=job.cfg, samples=samples,
                 stderr=failed[0].stderr_tail if failed else "")
    rec.tags[NOTE] = describe(rec)
    return rec


def machine_numbers(results: list[PointResult]) -> dict[str, float]:
    """The machine's numbers over the point's processes (the median: the load average moves between them)."""
    keys = set().union(*(r.machine for r in results)) if results else set()
    return {k: statistics.median(r.machine[k] for r in results if k in r.machine) for k in sorted(keys)}


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


def measured(point: Point, results: list[PointResult], tags: dict[str, str],
             machine: MachineCheck | None = None) -> tuple[dict, dict]:
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
        shaky = [op for op in samples if unstable(metrics, op)]
        tags["unstable"] = str(bool(shaky)).lower()
        if shaky:
            tags["unstable_ops"] = ",".join(shaky)
            tags["unstable_hint"] = hint(metrics, shaky[0], tags["noisy"] == "true", machine)
    return metrics, samples


def unstable(metrics: dict[str, float], op: str) -> bool:
    """Whether a re-run of this op could read far from this run (the bounds above)."""
    interval = metrics[f"{op}_ci95_high_s"] / metrics[f"{op}_ci95_low_s"]
    return interval > UNSTABLE_INTERVAL or metrics.get(f"{op}_process_spread", 1.0) > UNSTABLE_SPREAD


def hint(metrics: dict[str, float], op: str, noisy: bool, machine: MachineCheck | None = None) -> str:
    """What to do about an unstable point, in one line."""
    spread = metrics.get(f"{op}_process_spread", 1.0)
    lo, hi = metrics[f"{op}_ci95_low_s"], metrics[f"{op}_ci95_high_s"]
    apart = f", its processes {spread:.2f}× apart" if spread > 1 else ""
    why = f"{op}: a re-run may read {lo * 1e3:.4g}–{hi * 1e3:.4g} ms{apart}"
    if noisy:
        return f"{why}; other processes used the CPU meanwhile: measure on a quiet machine"
    if machine is not None and machine.noisy:
        return (f"{why}; the machine itself drifts (a fixed loop's windows spread {machine.window_spread:.2f}×): "
                "measure on a quieter machine, or more processes (bench.processes=10)")
    return f"{why}; the machine itself may be noisy: try bench=thorough, or more processes (bench.processes=10)"


def describe(rec: Record) -> str:
    """The run's one-line description: what was measured, the median and the interval (or why there is none)."""
    if rec.outcome == "failed":
        return f"FAILED: {rec.tags['failure_reason'].splitlines()[0]}"
    if rec.outcome == "skipped":
        return "skipped: " + "; ".join(f"{k.removeprefix('skip_reason_')} {v}" for k, v in rec.tags.items()
                                       if k.startswith("skip_reason_"))
    m, processes = rec.metrics, len(next(iter(rec.samples.values())).get("processes", [None]))
    ops = [f"{op} {m[f'{op}_median_s'] * 1e3:.4g} ms [{m[f'{op}_ci95_low_s'] * 1e3:.4g}, "
           f"{m[f'{op}_ci95_high_s'] * 1e3:.4g}]" for op in rec.samples]
    flags = [flag.upper() for flag in ("noisy", "unstable") if rec.tags.get(flag) == "true"]
    return (f"{rec.run_name} on {rec.params['device']}: " + "; ".join(ops) + f" (median per call and the 95% "
            f"interval of a re-run, {processes} process{'es' if processes > 1 else ''})"
            + (f" {', '.join(flags)}" if flags else ""))


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

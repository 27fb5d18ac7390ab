"""Turn one measured point into what lands in MLflow (name, params, metrics, tags, artifacts), as plain data."""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from experiments.environment import fingerprint, suite_record
from experiments.protocol import Point, PointResult

STATUS = {"ok": "FINISHED", "skipped": "KILLED", "failed": "FAILED", "interrupted": "KILLED"}
REASON_CHARS = 4000  # well under MLflow's tag value limit
# The params of every point run, besides the flattened config; compare and report select and group by them.
PARAMS = ("framework", "compile", "mode", "model", "precision", "batch_size", "device", "device_requested", "ops",
          "param_count", "repeat")
META = "record.json"


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
    stderr: str = ""  # the child's last output, for a failed point

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


def mode(framework: str, compiled: bool) -> str:
    """How a framework ran: jax-jit, jax-eager, torch-eager, torch-compile (`compile` unless jax's `jit`)."""
    return f"{framework}-" + ({"jax": "jit"}.get(framework, "compile") if compiled else "eager")


def flatten(d: dict, prefix: str = "") -> dict[str, str]:
    out: dict[str, str] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten(v, key + "."))
        else:
            out[key] = json.dumps(v) if isinstance(v, list) else str(v)
    return out


def build(cfg: dict, point: Point, result: PointResult, param_count: int) -> Record:
    """cfg: the resolved job config; point: its batch size and ops; result: the child's line or a failure."""
    fw, model, prec = cfg["framework"]["name"], cfg["model"]["name"], cfg["precision"]["name"]
    run_mode, bs = mode(fw, cfg["framework"]["compile"]), point.batch_size
    params = {
        "framework": fw, "compile": str(cfg["framework"]["compile"]).lower(), "mode": run_mode, "model": model,
        "precision": prec, "batch_size": str(bs), "device": result.device, "device_requested": cfg["device"],
        "ops": ",".join(point.ops), "param_count": str(param_count), "repeat": str(cfg.get("repeat", 0)),
    }
    assert tuple(params) == PARAMS
    params |= flatten(cfg, "config.")
    env = result.environment
    tags = {**env, **suite_record(), "env_fingerprint": fingerprint(env) if env else "n/a"}
    metrics: dict[str, float] = {}
    samples: dict[str, dict] = {}
    if result.failure is not None:
        outcome = "failed"
        tags["failure_reason"] = f"{result.failure}\n{result.stderr_tail}"[-REASON_CHARS:]
    else:
        for op, r in result.ops.items():
            if r.status == "ok":
                metrics |= {f"{op}_{k}": v for k, v in r.metrics().items()}
                samples[op] = {**dataclasses.asdict(r.measurement), "device": r.device}
            else:
                tags[f"skip_reason_{op}"] = r.reason[:REASON_CHARS]
        outcome = "ok" if samples else "skipped"
    tags["outcome"] = outcome
    rep = f" · r{cfg['repeat']}" if cfg.get("repeat") else ""
    return Record(run_name=f"{model} · {run_mode} · {prec} · bs{bs}{rep}", slug=f"{model}-{run_mode}-{prec}-bs{bs}",
                  outcome=outcome, params=params, metrics=metrics, tags=tags, config=cfg, samples=samples,
                  stderr=result.stderr_tail)

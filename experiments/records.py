"""Turn one measured point into what lands in MLflow (name, params, metrics, tags, files), as plain data."""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

import yaml

from experiments.environment import fingerprint, suite_record

STATUS = {"ok": "FINISHED", "skipped": "KILLED", "failed": "FAILED"}
REASON_CHARS = 4000  # well under MLflow's tag value limit


@dataclass
class Record:
    run_name: str
    slug: str
    outcome: str  # ok | skipped | failed
    params: dict[str, str]
    metrics: dict[str, float]
    tags: dict[str, str]
    files: dict[str, str] = field(default_factory=dict)  # artifact name -> text

    @property
    def status(self) -> str:
        return STATUS[self.outcome]

    def save(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        for name, text in self.files.items():
            (directory / name).write_text(text)
        meta = {k: v for k, v in asdict(self).items() if k != "files"}
        (directory / "record.json").write_text(json.dumps(meta, indent=1))

    @classmethod
    def load(cls, directory: Path) -> "Record":
        meta = json.loads((directory / "record.json").read_text())
        files = {p.name: p.read_text() for p in directory.iterdir() if p.suffix in (".json", ".yaml", ".txt")
                 and p.name != "record.json"}
        return cls(**meta, files=files)


def mode(framework: str, compiled: bool) -> str:
    return {"jax": ("eager", "jit"), "torch": ("eager", "compile")}[framework][compiled]


def flatten(d: dict, prefix: str = "") -> dict[str, str]:
    out: dict[str, str] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten(v, key + "."))
        else:
            out[key] = json.dumps(v) if isinstance(v, list) else str(v)
    return out


def build(cfg: dict, point: dict, result: dict, param_count: int) -> Record:
    """cfg: the resolved job config; point: its batch size and ops; result: the child's line or a failure."""
    fw, compiled, model, prec = (cfg["framework"]["name"], cfg["framework"]["compile"],
                                 cfg["model"]["name"], cfg["precision"]["name"])
    bs = point["batch_size"]
    label = f"{fw}-{mode(fw, compiled)}"
    env = result.get("environment", {})
    params = {
        "framework": fw, "compile": str(compiled).lower(), "mode": label, "model": model, "precision": prec,
        "batch_size": str(bs), "device": result.get("device", "n/a"), "device_requested": cfg["device"],
        "ops": ",".join(point["ops"]), "param_count": str(param_count), "repeat": str(cfg.get("repeat", 0)),
        **flatten(cfg, "config."),
    }
    tags = {**env, **suite_record(), "env_fingerprint": fingerprint(env) if env else "n/a"}
    metrics: dict[str, float] = {}
    samples: dict[str, dict] = {}
    if "failed" in result:
        outcome = "failed"
        tags["failure_reason"] = f"{result['failed']}\n{result.get('stderr_tail', '')}"[-REASON_CHARS:]
    else:
        ops = result["ops"]
        for op, r in ops.items():
            if r["status"] == "ok":
                metrics.update({f"{op}_{k}": float(v) for k, v in r["stats"].items()})
                samples[op] = {k: r[k] for k in ("samples_s", "block", "stop_reason", "elapsed_s", "device") if k in r}
            else:
                tags[f"skip_reason_{op}"] = r["reason"][:REASON_CHARS]
        outcome = "ok" if samples else "skipped"
    tags["outcome"] = outcome
    files = {"config.yaml": yaml.safe_dump(cfg, sort_keys=False),
             "environment.json": json.dumps(tags, indent=1, sort_keys=True)}
    if samples:
        files["samples.json"] = json.dumps(samples)
    if "stderr_tail" in result:
        files["stderr.txt"] = result["stderr_tail"]
    rep = f" · r{cfg['repeat']}" if cfg.get("repeat") else ""
    return Record(run_name=f"{model} · {label} · {prec} · bs{bs}{rep}", slug=f"{model}-{label}-{prec}-bs{bs}",
                  outcome=outcome, params=params, metrics=metrics, tags=tags, files=files)

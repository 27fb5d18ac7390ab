"""Measuring child: `python -m experiments.worker SPEC RESULTS` times one job's points with one framework.

It imports only the selected framework, writes one JSON line per finished point (so a crash loses
only the point in progress) and never talks to MLflow.
"""
from __future__ import annotations

import json
import sys
from dataclasses import fields
from pathlib import Path

import models
from experiments import timing
from experiments.backends import DeviceUnavailable, Unsupported, load
from experiments.environment import host_record


def check_device(step, out, configured: str) -> str:
    """The device the output lives on; a silent fallback to another device is an error, not a result."""
    actual = step.device_of(out)
    if actual.split(":")[0] != configured.split(":")[0]:
        raise RuntimeError(f"outputs live on {actual}, not on the configured {configured}")
    return actual


def measure_point(backend, spec, model, batch: int, ops: list[str], budget: timing.Budget, device: str) -> dict:
    out: dict[str, dict] = {}
    for op in ops:
        try:
            step = backend.prepare(model, op, batch, spec["compile"], spec["seed"])
        except Unsupported as e:
            out[op] = {"status": "skipped", "reason": str(e)}
            continue
        seen: list[str] = []
        m = timing.measure(step.fn, step.sync, budget, inspect=lambda o: seen.append(check_device(step, o, device)))
        out[op] = {"status": "ok", "device": seen[0], "block": m.block, "stop_reason": m.stop_reason,
                   "elapsed_s": m.elapsed_s, "samples_s": m.samples_s, "stats": timing.summarize(m, batch).as_dict()}
        del step  # free this op's model and state before the next one is built
    return out


def main(spec_path: str, results_path: str) -> int:
    spec = json.loads(Path(spec_path).read_text())
    backend = load(spec["framework"])
    env = host_record()
    env["precision_policy"] = f"{spec['precision']}/tf32-{'on' if spec['tf32'] else 'off'}"
    try:
        device = backend.configure(spec["precision"], spec["device"], spec["tf32"])
        skip = None
    except Unsupported as e:
        device, skip = "n/a", str(e)
    except DeviceUnavailable as e:
        print(f"nnbench: error: {e}", file=sys.stderr)
        return 3
    env.update(backend.environment())
    model = models.load(**spec["model"])
    names = {f.name for f in fields(timing.Budget)}
    budget = timing.Budget(**{k: v for k, v in spec["bench"].items() if k in names})
    with open(results_path, "a") as f:
        for point in spec["points"]:
            if skip:
                ops = {op: {"status": "skipped", "reason": skip} for op in point["ops"]}
            else:
                ops = measure_point(backend, spec, model, point["batch_size"], point["ops"], budget, device)
            line = {"batch_size": point["batch_size"], "device": device, "environment": env, "ops": ops}
            f.write(json.dumps(line) + "\n")
            f.flush()
    return 0


def probe(framework: str, precision: str, device: str) -> int:
    """Check that the framework can give this device and precision, before a sweep writes anything."""
    try:
        print(load(framework).configure(precision, device, False))
    except (DeviceUnavailable, Unsupported) as e:
        print(e)
        return 3
    return 0


if __name__ == "__main__":
    if sys.argv[1] == "--probe":
        sys.exit(probe(*sys.argv[2:5]))
    sys.exit(main(*sys.argv[1:3]))

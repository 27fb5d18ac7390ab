"""Measuring child: `python -m experiments.worker REQUEST RESULTS` times one job's points with one framework.

It imports only the selected framework, writes one JSON line per finished point (so a crash loses
only the point in progress) and never talks to MLflow.
"""
from __future__ import annotations

import sys
from pathlib import Path

import models
from experiments import timing
from experiments.backends import DeviceUnavailable, Unsupported, load
from experiments.environment import host_record
from experiments.protocol import OpResult, PointResult, Request


def check_device(step, out, configured: str) -> str:
    """The device the output lives on; a silent fallback to another device is an error, not a result."""
    actual = step.device_of(out)
    if actual.split(":")[0] != configured.split(":")[0]:
        raise RuntimeError(f"outputs live on {actual}, not on the configured {configured}")
    return actual


def measure_op(backend, spec: models.ModelSpec, req: Request, op: str, batch: int, device: str) -> OpResult:
    try:
        step = backend.prepare(spec, op, batch, req.compile, req.seed)
    except Unsupported as e:
        return OpResult("skipped", reason=str(e))
    seen: list[str] = []
    m = timing.measure(step.fn, step.sync, req.budget, inspect=lambda o: seen.append(check_device(step, o, device)))
    return OpResult("ok", device=seen[0], measurement=m, stats=timing.summarize(m, batch), calls_per_block=m.block)


def main(request_path: str, results_path: str) -> int:
    req = Request.from_json(Path(request_path).read_text())
    backend = load(req.framework)
    env = host_record() | {"precision_policy": f"{req.precision}/tf32-{'on' if req.tf32 else 'off'}"}
    try:
        device = backend.configure(req.precision, req.device, req.tf32)
    except DeviceUnavailable as e:
        print(f"nnbench: error: {e}", file=sys.stderr)
        return 3
    env |= backend.environment()
    spec = models.load(**req.model)
    with open(results_path, "a") as f:
        for point in req.points:
            # each op's model and state are freed before the next op is built
            ops = {op: measure_op(backend, spec, req, op, point.batch_size, device) for op in point.ops}
            f.write(PointResult(point.batch_size, device, env, ops).to_json() + "\n")
            f.flush()
    return 0


def probe(framework: str, precision: str, device: str) -> int:
    """Check that the framework imports and gives this device and precision, before a sweep writes anything."""
    try:
        print(load(framework).configure(precision, device, False))
    except ImportError as e:
        print(f"{e} (in {sys.executable}): install it, see README")
        return 3
    except DeviceUnavailable as e:
        print(e)
        return 3
    return 0


if __name__ == "__main__":
    if sys.argv[1] == "--probe":
        sys.exit(probe(*sys.argv[2:5]))
    sys.exit(main(*sys.argv[1:3]))

"""The worker on real frameworks: what it imports, what it records, and the first call."""
import dataclasses
import subprocess
import sys

import pytest

from experiments.harness import manager
from experiments.common.protocol import Point, PointResult, Request, Setup
from tests.helpers import FORMAT, ROOT, budget

REQUEST = Request("jax", Setup("fp32", "auto", compile=True, memory_format="nhwc"), {"name": "lenet"}, 0,
                  budget("quick", warmup_s=0.02, max_time_s=0.2), (Point(2, ("inference", "training")),))
OTHER = {"jax": "torch", "torch": "jax"}


@pytest.mark.parametrize("framework", ["jax", "torch"])
def test_worker_imports_only_its_framework_and_records_its_versions(tmp_path, framework):
    setup = Setup("fp32", "auto", compile=framework == "jax", memory_format=FORMAT[framework])
    req = dataclasses.replace(REQUEST, framework=framework, setup=setup)
    (tmp_path / "request.json").write_text(req.to_json())
    out = tmp_path / "results.jsonl"
    probe = (f"import runpy, sys; sys.argv = ['worker', {str(tmp_path / 'request.json')!r}, {str(out)!r}]\n"
             "try:\n    runpy.run_module('experiments.measure.worker', run_name='__main__')\n"
             "except SystemExit:\n    pass\n"
             "print(sorted(m for m in ('jax', 'torch', 'mlflow', 'hydra', 'pandas') if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, env=manager.environ(), capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip().splitlines()[-1] == str([framework])
    (line,) = [PointResult.from_json(s) for s in out.read_text().splitlines()]
    env = line.environment
    mod = __import__(framework)
    assert env[f"{framework}_version"] == mod.__version__ and f"{OTHER[framework]}_version" not in env
    assert line.device == "cpu" and env["precision_policy"] == "fp32/tf32-off"
    for op in ("inference", "training"):
        r = line.ops[op]
        assert r.status == "ok" and r.device == "cpu" and r.stats.n_samples == len(r.measurement.samples_s)
        assert r.stats.ci95_low_s <= r.stats.median_s <= r.stats.ci95_high_s
        assert r.metrics()["calls_per_block"] == r.measurement.block >= 1
    if framework == "jax":  # the first call holds the trace and compile: with jit it is far slower than a steady call
        stats = line.ops["training"].stats
        assert stats.first_call_s > 10 * stats.median_s

"""The measuring child on real frameworks: what it imports, what it records, and the first call."""
import json
import subprocess
import sys

import pytest

from experiments.job import ROOT, child_env

SPEC = {"compile": True, "model": {"name": "lenet"}, "precision": "fp32", "tf32": False, "device": "auto",
        "seed": 0, "bench": {"warmup_s": 0.02, "min_samples": 6, "max_time_s": 0.2, "target_rel_ci": 0.05,
                             "min_block_s": 0.001},
        "points": [{"batch_size": 2, "ops": ["inference", "training"]}]}
OTHER = {"jax": "torch", "torch": "jax"}


@pytest.mark.parametrize("framework", ["jax", "torch"])
def test_child_imports_only_its_framework_and_records_its_versions(tmp_path, framework):
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({**SPEC, "framework": framework, "compile": framework == "jax"}))
    out = tmp_path / "results.jsonl"
    probe = (f"import runpy, sys; sys.argv = ['worker', {str(spec)!r}, {str(out)!r}]\n"
             "try:\n    runpy.run_module('experiments.worker', run_name='__main__')\n"
             "except SystemExit:\n    pass\n"
             "print(sorted(m for m in ('jax', 'torch', 'mlflow', 'hydra', 'pandas') if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, env=child_env(), capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip().splitlines()[-1] == str([framework])
    (line,) = [json.loads(s) for s in out.read_text().splitlines()]
    env = line["environment"]
    mod = __import__(framework)
    assert env[f"{framework}_version"] == mod.__version__ and f"{OTHER[framework]}_version" not in env
    assert line["device"] == "cpu" and env["precision_policy"] == "fp32/tf32-off"
    for op in ("inference", "training"):
        r = line["ops"][op]
        assert r["status"] == "ok" and r["device"] == "cpu" and r["stats"]["n_samples"] == len(r["samples_s"])
        assert r["stats"]["ci95_low_s"] <= r["stats"]["median_s"] <= r["stats"]["ci95_high_s"]


def test_jit_compile_lands_in_first_call(tmp_path):
    """The first call holds the trace and compile: with jit it is far slower than a steady call."""
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({**SPEC, "framework": "jax"}))
    out = tmp_path / "results.jsonl"
    subprocess.run([sys.executable, "-m", "experiments.worker", str(spec), str(out)], cwd=ROOT, env=child_env(),
                   check=True, capture_output=True)
    stats = json.loads(out.read_text())["ops"]["training"]["stats"]
    assert stats["first_call_s"] > 10 * stats["median_s"]

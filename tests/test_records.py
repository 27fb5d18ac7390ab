"""What one point turns into for MLflow: names, params, metrics, tags, status; no framework needed."""
import json

from experiments import records

CFG = {"framework": {"name": "torch", "compile": True}, "model": {"name": "lenet"},
       "precision": {"name": "fp32", "tf32": False}, "batch_size": None, "ops": ["inference", "training"],
       "device": "auto", "seed": 0, "bench": {"max_time_s": 5.0}}
STATS = {"median_s": 0.002, "p25_s": 0.0019, "p75_s": 0.0021, "ci95_low_s": 0.00195, "ci95_high_s": 0.00205,
         "min_s": 0.0018, "mean_s": 0.002, "std_s": 0.0001, "n_samples": 40, "first_call_s": 3.0,
         "throughput_samples_per_s": 16000.0}
ENV = {"torch_version": "2.13.0+cpu", "python_version": "3.11.7", "device_name": "cpu", "cpu_model": "X"}


def ok_result(ops):
    return {"batch_size": 32, "device": "cpu", "environment": ENV, "ops": ops}


def test_measured_point():
    r = ok_result({"inference": {"status": "ok", "device": "cpu", "block": 3, "stop_reason": "ci",
                                 "elapsed_s": 1.2, "samples_s": [0.002] * 40, "stats": STATS},
                   "training": {"status": "skipped", "reason": "no"}})
    rec = records.build(CFG, {"batch_size": 32, "ops": ["inference", "training"]}, r, 44426)
    assert rec.run_name == "lenet · torch-compile · fp32 · bs32"
    assert rec.outcome == "ok" and rec.status == "FINISHED"
    assert rec.metrics["inference_median_s"] == 0.002 and rec.metrics["inference_n_samples"] == 40
    assert not any(k.startswith("training_") for k in rec.metrics)
    assert rec.tags["skip_reason_training"] == "no"
    assert rec.params["batch_size"] == "32" and rec.params["config.batch_size"] == "None"
    assert rec.params["device"] == "cpu" and rec.params["device_requested"] == "auto"
    assert rec.params["config.ops"] == '["inference", "training"]' and rec.params["param_count"] == "44426"
    assert rec.tags["torch_version"] == "2.13.0+cpu" and len(rec.tags["env_fingerprint"]) == 16
    assert json.loads(rec.files["samples.json"])["inference"]["block"] == 3


def test_all_ops_skipped_is_a_skipped_run():
    r = ok_result({"inference": {"status": "skipped", "reason": "fp16 unsupported here"}})
    rec = records.build(CFG, {"batch_size": 32, "ops": ["inference"]}, r, 1)
    assert rec.outcome == "skipped" and rec.status == "KILLED" and "samples.json" not in rec.files


def test_failed_point_keeps_reason_and_output():
    r = {"batch_size": 8, "failed": "child killed by SIGSEGV", "stderr_tail": "x" * 10_000}
    rec = records.build(CFG, {"batch_size": 8, "ops": ["inference"]}, r, 1)
    assert rec.status == "FAILED" and rec.tags["outcome"] == "failed"
    assert len(rec.tags["failure_reason"]) == records.REASON_CHARS
    assert rec.files["stderr.txt"] == "x" * 10_000


def test_save_and_load_round_trip(tmp_path):
    r = ok_result({"inference": {"status": "skipped", "reason": "r"}})
    rec = records.build(CFG, {"batch_size": 32, "ops": ["inference"]}, r, 1)
    rec.save(tmp_path / rec.slug)
    assert records.Record.load(tmp_path / rec.slug) == rec


def test_fingerprint_ignores_run_specific_facts_but_not_versions():
    from experiments.environment import fingerprint
    a = fingerprint({**ENV, "host": "a"})
    assert a == fingerprint({**ENV, "host": "b"})
    assert a != fingerprint({**ENV, "torch_version": "2.14.0"})

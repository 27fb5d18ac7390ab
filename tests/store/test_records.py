"""What one point turns into for MLflow: names, params, metrics, tags, status (a paired point's comparison with its
baseline too); no framework needed."""
import json
from dataclasses import replace

import numpy as np
import pytest
import yaml

import models
from experiments.common.columns import PARAMS
from experiments.stats.paired import PAIRED
from experiments.common.job import Job
from experiments.common.protocol import STATS, OpResult, Point, PointResult
from experiments.measure.reading import Paired, read
from experiments.stats.paired import PairedComparison
from experiments.stats.verdicts import Verdict
from experiments.store import records
from experiments.sweep import preflight
from tests.helpers import config, ok_op

ENV = {"torch_version": "2.13.0+cpu", "python_version": "3.11.7", "device_name": "cpu", "cpu_model": "X"}
POINT = Point(32, ("inference", "training"))
JOB = Job(config("framework=torch", "framework.compile=true"), models.load("lenet"), (POINT,))


def build(point: Point, results: list[PointResult]) -> records.Record:
    return records.build(JOB, read(point, results))


def ok_result(ops: dict[str, OpResult]) -> PointResult:
    return PointResult(32, "cpu", ENV, ops)


def test_measured_point():
    r = ok_result({"inference": ok_op(0.002, 32, [0.002] * 40), "training": OpResult("skipped", reason="no")})
    rec = build(POINT, [r])
    assert rec.run_name == "lenet · torch-compile · fp32 · bs32"
    assert rec.outcome == "ok" and rec.status == "FINISHED"
    assert rec.metrics["inference_median_s"] == 0.002 and rec.metrics["inference_n_samples"] == 40
    assert {f"inference_{s}" for s in STATS if s != "first_call_warm_s"} <= set(rec.metrics)  # one process: no warm
    assert rec.metrics["inference_calls_per_block"] == 1
    assert not any(k.startswith("training_") for k in rec.metrics)
    assert rec.tags["skip_reason_training"] == "no"
    assert tuple(rec.params)[:len(PARAMS)] == PARAMS
    assert rec.params["batch_size"] == "32" and rec.params["config.batch_size"] == "None"
    assert rec.params["device"] == "cpu" and rec.params["device_requested"] == "auto"
    assert rec.params["config.ops"] == '["inference", "training"]' and rec.params["param_count"] == "44426"
    assert rec.tags["torch_version"] == "2.13.0+cpu" and len(rec.tags["env_fingerprint"]) == 16
    assert rec.samples["inference"]["block"] == 1 and rec.samples["inference"]["samples_s"] == [0.002] * 40


def test_all_ops_skipped_is_a_skipped_run():
    rec = build(Point(32, ("inference",)),
                        [ok_result({"inference": OpResult("skipped", reason="fp16 unsupported here")})])
    assert rec.outcome == "skipped" and rec.status == "FINISHED" and not rec.samples  # KILLED: an interrupt only
    assert rec.tags["outcome"] == "skipped" and rec.tags[records.NOTE] == "skipped: inference fp16 unsupported here"


def test_failed_point_keeps_reason_and_output():
    r = PointResult(8, failure="worker killed by SIGSEGV", stderr_tail="x" * 10_000)
    rec = build(Point(8, ("inference",)), [r])
    assert rec.status == "FAILED" and rec.tags["outcome"] == "failed"
    assert len(rec.tags["failure_reason"]) == records.REASON_CHARS
    assert rec.stderr == "x" * 10_000


def test_save_and_load_round_trip(tmp_path):
    for i, r in enumerate((ok_result({"inference": ok_op(0.003, 32), "training": OpResult("skipped", reason="r")}),
                           PointResult(32, failure="worker killed by SIGKILL", stderr_tail="tail"))):
        rec = build(POINT, [r])
        rec.save(tmp_path / str(i))
        assert records.Record.load(tmp_path / str(i)) == rec
    saved = json.loads((tmp_path / "1" / "environment.json").read_text())
    assert saved == rec.tags


def test_worker_protocol_round_trip():
    r = ok_result({"inference": ok_op(0.003, 32), "training": OpResult("skipped", reason="r")})
    assert PointResult.from_json(r.to_json()) == r


def test_fingerprint_ignores_run_specific_facts_but_not_versions():
    from experiments.measure.environment import fingerprint
    a = fingerprint({**ENV, "host": "a"})
    assert a == fingerprint({**ENV, "host": "b"})
    assert a != fingerprint({**ENV, "torch_version": "2.14.0"})


def test_processes_fold_into_one_run_with_derived_metrics():
    """Three processes of one point: one record, the median of their medians, every sample kept per process,
    FLOP rates and MFU from the combined median and the calibrated peak, and the noisiest process flags it."""
    results = []
    for median, busy in ((0.002, 0.0), (0.003, 0.5), (0.004, 0.1)):
        op = ok_op(median, 32)
        gpu = {"device_name": "NVIDIA H200", "precision_policy": "bf16/tf32-off", "sync_policy": "pipelined"}
        results.append(PointResult(32, "cuda:0", ENV | gpu,
                                   {"inference": replace(op, flops=2 * 10**9, background_cores=busy,
                                                         peak_mem_bytes=int(median * 1e9))}, peak_tflops=2.0))
    rec = build(Point(32, ("inference",)), results)
    m = rec.metrics
    assert m["inference_median_s"] == 0.003 and m["inference_n_samples"] == 18
    assert m["inference_achieved_tflops"] == pytest.approx(2e9 / 0.003 / 1e12)
    assert m["inference_mfu"] == m["inference_mfu_vendor"] == pytest.approx(m["inference_achieved_tflops"] / 989)
    assert m["peak_tflops"] == 989 and rec.tags["peak_source"].startswith("data sheet")  # a known GPU
    assert m["inference_peak_mem_bytes"] == 4_000_000  # the largest process's
    assert m["inference_background_cores"] == 0.5 and rec.tags["noisy"] == "true"
    assert [len(p["samples_s"]) for p in rec.samples["inference"]["processes"]] == [6, 6, 6]
    assert rec.params["memory_format"] == "contiguous" and rec.params["mode"] == "torch-compile"
    assert rec.params["sync"] == "pipelined" and "pipelined: one sync per block" in rec.tags[records.NOTE]


def test_a_failed_process_fails_the_point_and_keeps_the_others_samples():
    ok = ok_result({"inference": ok_op(0.002, 32), "training": OpResult("skipped", reason="r")})
    crashed = PointResult(32, failure="worker killed by SIGSEGV", stderr_tail="segfault here")
    rec = build(POINT, [ok, crashed, ok])
    assert rec.outcome == "failed" and not any(k.startswith(("inference_", "training_")) for k in rec.metrics)
    assert rec.tags["failure_reason"].startswith("worker killed by SIGSEGV (process 2 of 3)")
    assert rec.tags[records.NOTE].startswith("FAILED: worker killed by SIGSEGV (process 2 of 3)")
    assert len(rec.samples["inference"]["processes"]) == 2 and rec.stderr == "segfault here"


def test_mode_names_the_variant_measured():
    def mode(*overrides: str) -> str:
        return Job(config(*overrides), None, ()).mode

    assert mode("framework=jax") == "jax-jit" and mode("framework=jax", "framework.compile=false") == "jax-eager"
    assert mode("framework=torch", "framework.memory_format=channels_last") == "torch-eager-cl"
    assert mode("framework=torch", "framework.compile=true", "framework.compile_mode=reduce-overhead") == (
        "torch-compile-cg")
    assert mode("framework=external", "external.name=Lux") == "Lux"


def test_numbers_are_metrics_and_identity_is_tags():
    """The machine's numbers and the parameter count are metrics the UI can sort and chart; the parameter count
    stays a param too, for selections like `compare param_count=44426`."""
    machine = {"cpu_count_logical": 2.0, "cpu_count_physical": 2.0, "memory_total_bytes": 2.5e10, "load_avg_1m": 0.4}
    r = replace(ok_result({"inference": ok_op(0.002, 32)}), machine=machine)
    rec = build(Point(32, ("inference",)), [r, replace(r, machine=machine | {"load_avg_1m": 1.2}),
                                                          replace(r, machine=machine | {"load_avg_1m": 0.8})])
    assert rec.metrics["load_avg_1m"] == 0.8 and rec.metrics["memory_total_bytes"] == 2.5e10  # median of processes
    assert rec.metrics["param_count"] == 44426 and rec.params["param_count"] == "44426"
    assert not set(machine) & set(rec.tags)


def processes(*medians: float) -> list[PointResult]:
    return [ok_result({"inference": ok_op(m, 32, list(m * np.linspace(0.99, 1.01, 40)))}) for m in medians]


def test_processes_that_disagree_threefold_flag_the_point_unstable():
    """Five processes at 0.25-0.75 ms (as the README sweep once read torch LeNet bs2): unstable, with a hint."""
    rec = build(Point(32, ("inference",)), processes(0.25e-3, 0.4e-3, 0.38e-3, 0.746e-3, 0.3e-3))
    assert rec.metrics["inference_process_spread"] == pytest.approx(0.746 / 0.25)
    assert rec.tags["unstable"] == "true" and rec.tags["unstable_ops"] == "inference"
    assert "processes 2.98× apart" in rec.tags["unstable_hint"] and "bench=thorough" in rec.tags["unstable_hint"]
    assert rec.tags[records.NOTE].endswith("UNSTABLE")
    steady = build(Point(32, ("inference",)), processes(1.00e-3, 1.02e-3, 0.99e-3, 1.01e-3, 1.00e-3))
    assert steady.tags["unstable"] == "false" and "unstable_hint" not in steady.tags


def test_the_run_description_is_one_line_with_the_median_and_interval():
    rec = build(Point(32, ("inference",)), processes(1.00e-3, 1.02e-3, 0.99e-3, 1.01e-3, 1.00e-3))
    note = rec.tags[records.NOTE]
    assert "\n" not in note and note.startswith("lenet · torch-compile · fp32 · bs32 on cpu: inference 1 ms [")
    assert note.endswith("(median per call and the 95% interval of a re-run, 5 processes)")


def test_a_profile_adds_metrics_tags_and_files_and_changes_nothing(tmp_path):
    from experiments.common.protocol import PARTS, OpProfile

    reading = read(POINT, [ok_result({"inference": ok_op(0.002, 32), "training": ok_op(0.004, 32)})])
    rec = records.build(JOB, reading)
    (tmp_path / "files" / "inference").mkdir(parents=True)
    (tmp_path / "files" / "inference" / "top.md").write_text("# top\n")
    prof = OpProfile(0.003, {"conv": 0.002, "overhead": 0.001}, [0.003] * 5, [], 0.5)
    result = ok_result({"inference": OpResult("ok", profile=prof), "training": OpResult("skipped", reason="gone")})
    out = records.add_profile(rec, reading, result, tmp_path / "files", tmp_path / "point")
    assert {k: out.metrics[k] for k in rec.metrics} == rec.metrics and out.tags["profile"] == "ok"
    assert {f"inference_time_{p}_s" for p in PARTS} <= set(out.metrics) and out.metrics["inference_time_norm_s"] == 0
    assert out.metrics["inference_profile_wall_ratio"] == pytest.approx(1.5)
    assert out.metrics["inference_profile_steps"] == 5 and out.tags["profile_skip_reason_training"] == "gone"
    assert (tmp_path / "point" / "profile" / "inference" / "top.md").exists()
    failed = records.add_profile(rec, reading, PointResult(32, failure="worker killed by SIGSEGV"), tmp_path,
                                 tmp_path)
    assert failed.metrics == rec.metrics and failed.tags["profile"] == "failed"


def test_a_paired_point_carries_its_comparison_as_tags_and_metrics(tmp_path):
    """torch-compile against torch-eager, paired: the tags say how it was compared (design, its label, its baseline,
    each op's verdict, what else differs) and the metrics each op's speedup (the baseline's time over its own) with
    its interval, p, q, trials, the interval's level and the spread it used; an op with one trial has no interval;
    the baseline's own points say so."""
    reading = read(POINT, processes(1.00e-3, 1.02e-3, 0.99e-3))
    slower = PairedComparison(1.6, 1.5, 1.7, 0.001, 0.004, Verdict.SLOWER, 5, 0.985, 0.03, 1.07)
    once = PairedComparison(0.8, float("nan"), float("nan"), float("nan"), float("nan"), Verdict.UNKNOWN, 1)
    paired = Paired("torch-compile fp32", "torch-eager fp32", {"inference": slower, "training": once},
                    ("threads 1 vs 2", "layout channels_last vs contiguous"), design="in-process")
    rec = records.build(JOB, replace(reading, paired=paired))
    assert {k: rec.tags[k] for k in ("design", "paired_design", "variant", "compared_with", "inference_verdict",
                                     "training_verdict", "differs")} == {
        "design": "paired", "paired_design": "in-process", "variant": "torch-compile fp32",
        "compared_with": "torch-eager fp32", "inference_verdict": "slower", "training_verdict": "no verdict",
        "differs": "threads 1 vs 2; layout channels_last vs contiguous"}
    assert "paired_baseline" not in rec.tags
    assert {k: v for k, v in rec.metrics.items() if "speedup" in k} == pytest.approx({
        "inference_speedup": 1 / 1.6, "inference_speedup_ci95_low": 1 / 1.7, "inference_speedup_ci95_high": 1 / 1.5,
        "inference_speedup_p_value": 0.001, "inference_speedup_q_value": 0.004, "inference_speedup_trials": 5.0,
        "inference_speedup_look_level": 0.985, "inference_speedup_spread": 0.03,
        "training_speedup": 1.25, "training_speedup_trials": 1.0})
    assert {f"inference_{m}" for m in PAIRED} <= set(rec.metrics) and rec.metrics["inference_mde"] == 1.07
    assert "training_mde" not in rec.metrics  # one trial: not known
    rec.save(tmp_path / "point")
    assert records.Record.load(tmp_path / "point") == rec
    alike = records.build(JOB, replace(reading, paired=replace(paired, differs=())))
    assert alike.tags["differs"] == "nothing else"
    base = records.build(JOB, replace(reading, paired=Paired("torch-eager fp32", "torch-eager fp32")))
    assert {k: base.tags[k] for k in ("design", "paired_design", "variant", "compared_with", "paired_baseline")} == {
        "design": "paired", "paired_design": "bursts", "variant": "torch-eager fp32",
        "compared_with": "torch-eager fp32", "paired_baseline": "true"}
    assert not any("verdict" in k or k == "differs" for k in base.tags)
    assert not any("speedup" in k for k in base.metrics)


def test_an_unpaired_point_says_so_and_a_failed_one_says_nothing_of_design():
    rec = build(Point(32, ("inference",)), processes(1e-3, 1.01e-3))
    assert rec.tags["design"] == "unpaired" and "variant" not in rec.tags and "compared_with" not in rec.tags
    assert not any("speedup" in k for k in rec.metrics)
    failed = build(Point(8, ("inference",)), [PointResult(8, failure="worker killed by SIGSEGV")])
    assert "design" not in failed.tags


@pytest.mark.parametrize("overrides", [
    ("framework=jax", "model=lenet"), ("experiment=seed000", "framework=torch", "model=resnet", "precision=bf16"),
    ("experiment=modern", "framework=jax", "model=gpt_tiny", "framework.compile=false", "batch_size=8", "ops=[grad]"),
    ("framework=external", "external.name=x", "external.command='echo'", "runtime.allocator=jemalloc")])
def test_the_logged_config_is_omegaconfs_rendering_so_resume_keys_hold(overrides):
    """What a point logs and its resume key hashes, as OmegaConf renders the typed config (options by name, unset
    keys left out): stores written before keep matching."""
    from omegaconf import MISSING, OmegaConf

    from experiments.common.config import logged

    def known(d: dict) -> dict:
        return {k: known(v) if isinstance(v, dict) else v for k, v in d.items() if v != MISSING}

    c = config(*overrides)
    c = replace(c, external=replace(c.external, command=MISSING))  # a key left unset
    rendered = known(OmegaConf.to_container(OmegaConf.structured(c), enum_to_str=True, throw_on_missing=False))
    assert yaml.safe_dump(logged(c), sort_keys=False) == yaml.safe_dump(rendered, sort_keys=False)  # config.yaml


def test_the_resume_key_changes_with_what_is_measured_not_with_bookkeeping():
    """resume=true finds a point FINISHED by its key: a point measured on another budget, precision or mode is not the
    same point; another store, report or parity setting is."""
    def key(*overrides: str) -> str:
        job = preflight.job(config("model=lenet", "framework=torch", *overrides))
        return records.point_key(job, Point(8, ("inference",)))

    base = key()
    assert len({base, key("bench=quick"), key("bench.max_time_s=9"), key("precision=bf16"),
                key("framework.compile=true"), key("seed=3")}) == 6
    assert base == key("mlflow.experiment_name=other", "report.threshold=0.2", "parity=false", "batch_size=8")

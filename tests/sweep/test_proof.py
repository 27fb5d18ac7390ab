"""What a job's points record about their model: parity from one process per sweep (cached in the sweep's dir),
where the FLOPs come from, the parameter count per framework, the network's source in the tags and the resume key;
and a framework the network lacks, skipped in the parent with the reason."""
from __future__ import annotations

import dataclasses
import json
import sys
import textwrap

import pytest

import models
from experiments.common.protocol import Point
from experiments.measure import parity
from experiments.store import records
from experiments.store.sweepdir import Sweep, SweepState
from experiments.sweep import paired_engine, preflight, proof, unpaired_engine
from experiments.sweep.points import Points
from tests.helpers.groups import measured_together
from tests.models.test_network import CONV, MLP


@pytest.fixture(scope="module")
def nets(tmp_path_factory):
    d = tmp_path_factory.mktemp("proof")
    (d / "mlp.py").write_text(textwrap.dedent(MLP))
    (d / "conv.py").write_text(textwrap.dedent(CONV))
    return d


def job(make_cfg, nets, file: str, *overrides: str):
    c = preflight.typed(make_cfg("model=file", f"model.path={nets / file}", "bench=quick", *overrides))
    return preflight.job(c)


@pytest.mark.slow
def test_parity_runs_once_per_sweep_and_every_point_records_it(make_cfg, nets, tmp_path, monkeypatch):
    asked = []
    real = proof.ask
    monkeypatch.setattr(proof, "ask", lambda j, t: asked.append(j) or real(j, t))  # a process per call
    jax_job = proof.tagged(job(make_cfg, nets, "mlp.py", "framework=jax"), tmp_path)
    torch_job = proof.tagged(job(make_cfg, nets, "mlp.py", "framework=torch"), tmp_path)
    assert len(asked) == 1 and len(list((tmp_path / proof.PROOFS).glob("*.json"))) == 1  # the second job: cached
    count = str(32 * 16 + 16 + 16 * 10 + 10)
    for j in (jax_job, torch_job):
        assert j.tags | {"parity_worst": "-"} == {  # compared at 8: the sweep's batch sizes 2 and 8, at least 8
            "parity": "ok", "parity_worst": "-", "parity_batch": "8", "flops_source": "torch", "param_count_jax": count,
            "param_count_torch": count, "param_counts_differ": "false", "model_source": f"file {nets / 'mlp.py'}",
            "model_source_version": models.load("file", path=str(nets / "mlp.py")).source.version}
        assert j.flops == {"inference:2": 2 * 2 * (32 * 16 + 16 * 10), "inference:8": 2 * 8 * (32 * 16 + 16 * 10),
                           "training:8": j.flops["training:8"]} and j.request().flops == j.flops
    off = proof.tagged(job(make_cfg, nets, "mlp.py", "parity=false"), tmp_path / "off")
    assert off.tags["parity"] == "unchecked" and off.tags["parity_reason"] == "parity=false: not checked"
    assert len(asked) == 2 and off.flops == torch_job.flops  # a process that only counts, as the comparing one did
    (kept,) = (tmp_path / "off" / proof.PROOFS).glob("*.json")
    assert parity.Proof.from_json(kept.read_text()).parity == parity.NOT_ASKED


def test_a_flops_only_process_counts_without_comparing(nets, monkeypatch, capsys):
    """parity=false: the network's FLOPs are still counted (one framework for both), the frameworks not compared."""
    monkeypatch.setattr(parity, "check", lambda *a, **k: pytest.fail("compared the frameworks"))
    monkeypatch.setattr(models, "load", lambda *a, **k: pytest.fail("checked both sides again: the door did"))
    assert parity.main(["--flops-only", json.dumps({"name": "file", "path": str(nets / "mlp.py")}), "inference:2"]) == 0
    got = parity.Proof.from_json(capsys.readouterr().out.strip().splitlines()[-1])
    assert got.parity == parity.NOT_ASKED and got.parity.status == "unchecked"
    assert [(c.op, c.batch, c.flops, c.source) for c in got.flops] == [("inference", 2, 2 * 2 * (32 * 16 + 16 * 10),
                                                                        "torch")]


def test_an_external_runner_s_job_starts_no_parity_process(make_cfg, tmp_path, monkeypatch):
    """A runner times its own code: nothing of nnbench's jax and torch models to check, whatever parity says."""
    monkeypatch.setattr(proof, "ask", lambda j, t: pytest.fail("no parity process for an external runner"))
    c = preflight.typed(make_cfg("framework=external", "external.name=Reference", f"external.command='{sys.executable} -c pass'",
                                 "model=lenet", "bench=quick", "parity=true"))
    tagged = proof.tagged(preflight.job(c), tmp_path)
    assert tagged.tags["parity"] == "unchecked" and tagged.tags["flops_source"] == "dsl"
    assert tagged.tags["parity_reason"] == "framework=external: the runner's own code, not checked"
    assert not (tmp_path / proof.PROOFS).exists()


def test_a_parity_process_that_fails_is_a_failed_parity_and_not_kept(make_cfg, nets, tmp_path):
    failed = proof.tagged(job(make_cfg, nets, "mlp.py", "runtime.python=/bin/false"), tmp_path)
    assert failed.tags["parity"] == "failed" and failed.flops == {}
    assert failed.tags["parity_reason"] == "the parity check's process exited 1: no output"
    assert not list((tmp_path / proof.PROOFS).glob("*.json"))  # the next job asks again


def test_a_network_with_one_framework_is_unchecked_and_its_other_framework_skipped(make_cfg, nets, tmp_path):
    jax_job = proof.tagged(job(make_cfg, nets, "conv.py", "framework=jax", "+model.torch_only=true"), tmp_path)
    assert jax_job.tags["parity"] == "unchecked" and "only torch is declared" in jax_job.tags["parity_reason"]
    assert jax_job.tags["flops_source"] == "declared" and jax_job.flops == {}  # conv.py counts its own
    assert unpaired_engine.lacks(jax_job) == "conv declares no Flax NNX module (flax=...): only torch measures it"
    (collector,) = measured_together([jax_job], tmp_path)  # no worker starts: every point skipped, with the reason
    assert not (tmp_path / "trials").exists()
    assert {k.record.outcome for k in collector.done} == {"skipped"} and len(collector.done) == len(jax_job.points)
    assert collector.done[0].record.tags["skip_reason_inference"] == unpaired_engine.lacks(jax_job)
    first = collector.done[0].record
    assert first.tags["parity"] == "unchecked" and first.run_name.startswith("conv · ")
    assert unpaired_engine.lacks(job(make_cfg, nets, "conv.py", "framework=torch", "+model.torch_only=true")) is None


def test_the_framework_a_network_lacks_is_skipped_while_its_cell_is_measured_with_the_other(make_cfg, nets, tmp_path,
                                                                                              fake_python, monkeypatch):
    """A torch-only network swept with jax and torch, paired, in a sweep that counts its progress: jax's points are
    skipped with the reason before anything is measured (no rate yet: no ETA), torch's are measured."""
    monkeypatch.setenv("FAKE_FAULT", "none")
    jobs = [job(make_cfg, nets, "conv.py", f"framework={fw}", "+model.torch_only=true", f"runtime.python={fake_python}")
            for fw in ("jax", "torch")]
    sweep = Sweep(tmp_path / "sweep")
    sweep.start(SweepState("sqlite:///x.db", "1", None, 2, 2, 0.0, measurements=2))
    collectors = [Points(j, tmp_path / f"job-{i}", sweep=sweep, ticks=False) for i, j in enumerate(jobs)]
    paired_engine.run_group(jobs, collectors, tmp_path, [None, None], None)
    (jax,), (torch,) = (c.records for c in collectors)
    assert jax.outcome == "skipped" and jax.tags["skip_reason_inference"] == unpaired_engine.lacks(jobs[0])
    assert torch.outcome == "ok" and torch.metrics["inference_median_s"] == 0.001


def test_a_sweep_of_one_framework_compares_nothing(make_cfg, tmp_path, monkeypatch):
    """A jax-only sweep (or `nnbench ab runtime.python=A,B framework=torch`) starts no parity process: nothing to
    compare with; a sweep of both frameworks would, and a job alone (its sweep unsaid) still does."""
    monkeypatch.setattr(proof, "ask", lambda j, t: pytest.fail("a parity process for a one-framework sweep"))
    lenet = preflight.job(preflight.typed(make_cfg("framework=jax", "model=lenet", "bench=quick")))
    configs = [{"framework": {"name": fw}, "model": {"name": "lenet"}} for fw in ("jax", "jax")]
    alone = dataclasses.replace(lenet, frameworks=proof.measured_with(configs, {"name": "lenet"}))
    tagged = proof.tagged(alone, tmp_path)
    assert tagged.tags["parity"] == "unchecked" and not (tmp_path / proof.PROOFS).exists()
    assert tagged.tags["parity_reason"] == "only jax measures it in this sweep: nothing to compare it with"
    both = configs + [{"framework": {"name": "torch"}, "model": {"name": "lenet"}}]
    assert proof.compares(dataclasses.replace(lenet, frameworks=proof.measured_with(both, {"name": "lenet"})))
    assert proof.compares(lenet) and not proof.measured_with(both, {"name": "mlp_relu"})


def test_editing_the_file_changes_the_resume_key(make_cfg, nets, tmp_path, monkeypatch):
    (tmp_path / "net.py").write_text(textwrap.dedent(MLP))
    monkeypatch.setattr(models._load, "_LOADED", {})  # each sweep is a fresh process: it loads the file it finds
    before = records.point_key(job(make_cfg, tmp_path, "net.py"), Point(8, ("inference",)))
    (tmp_path / "net.py").write_text(textwrap.dedent(MLP).replace("torch.relu", "torch.tanh"))
    models._load._LOADED.clear()
    after = job(make_cfg, tmp_path, "net.py")
    assert records.point_key(after, Point(8, ("inference",))) != before
    (tmp_path / "net.py").write_text(textwrap.dedent(MLP))  # the same content again: the same key
    models._load._LOADED.clear()
    assert records.point_key(job(make_cfg, tmp_path, "net.py"), Point(8, ("inference",))) == before

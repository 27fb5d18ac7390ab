"""The sweep's compile cache: a cell's first trial compiles cold, the later trials' fresh workers load, each still
compiles (or loads) exactly once, and first_call_s is the cold one. Paired, a group of one variant (its trials'
workers load what the first compiled, as the unpaired engine's processes do)."""
import pytest

from experiments.sweep import preflight, unpaired_engine
from tests.helpers.groups import measured_together


def job(make_cfg, *overrides):
    return preflight.job(preflight.typed(make_cfg("model=lenet", "bench=quick", "bench.processes=3",
                                                  "bench.max_processes=3", "ops=[inference]", "batch_size=8",
                                                  *overrides)))


def measured(this, tmp_path, cache):
    """The job's one point, measured paired (three trials of one fresh worker), or unpaired."""
    if not this.config.bench.paired:
        (rec,) = unpaired_engine.run_job(this, tmp_path / "job", cache=cache).records
        return rec
    ((rec,),) = (k.records for k in measured_together([this], tmp_path, [cache]))
    return rec


def check_cache(this, tmp_path):
    cache = tmp_path / "compile-cache"
    rec = measured(this, tmp_path, cache)
    runs = rec.samples["inference"]["processes"]
    assert len(runs) == 3
    assert rec.metrics["inference_compiles"] == 1  # every process compiled or loaded once: no recompile
    assert rec.metrics["inference_compile_cache_hits"] >= 2  # the later processes loaded from the cache
    assert rec.metrics["inference_first_call_s"] == runs[0]["first_call_s"]  # the cold one
    warm = sorted(r["first_call_s"] for r in runs[1:])
    assert rec.metrics["inference_first_call_warm_s"] == pytest.approx(sum(warm) / 2)
    return cache


@pytest.mark.slow
def test_jax_loads_what_the_first_trial_compiled(tmp_path, make_cfg):
    cache = check_cache(job(make_cfg, "framework=jax"), tmp_path)
    assert any((cache / "jax").iterdir())


@pytest.mark.slow
def test_torch_compile_loads_what_the_first_trial_compiled(tmp_path, make_cfg):
    cache = check_cache(job(make_cfg, "framework=torch", "framework.compile=true"), tmp_path)
    assert any((cache / "inductor").iterdir())


@pytest.mark.slow
def test_no_cache_means_every_process_compiles(tmp_path, make_cfg):
    """On the unpaired engine (bench.paired=false): its processes, one after another, each compile."""
    this = job(make_cfg, "framework=jax", "runtime.compile_cache=false", "bench.paired=false")
    rec = measured(this, tmp_path, None)
    assert len(rec.samples["inference"]["processes"]) == 3 and rec.metrics["inference_compile_cache_hits"] == 0
    assert rec.tags["design"] == "unpaired"

"""Profiles in the worker: one step's wall time split into one vocabulary for both frameworks, checked on every seed
model and op; the split itself on synthetic intervals; the category tables as data."""
import gzip
import inspect
import json
import re
from importlib import import_module

import pytest

import models
from experiments.common.config import OPS
from experiments.common.frameworks import references
from experiments.common.protocol import CATEGORIES, PARTS, OpProfile, Point, Request, Setup
from experiments.measure import categories, profile
from experiments.measure.backends import Span, Traced, load
from tests.helpers import FORMAT, SEEDS, budget, gpu_visible, tiny


def test_overlapping_ops_share_their_time_and_sum_to_the_union():
    spans = [Span("a", "conv", 0.0, 4.0), Span("b", "pool", 2.0, 6.0), Span("c", "copy", 8.0, 9.0),
             Span("empty", "other", 5.0, 5.0)]
    split = profile.split_time(spans)
    assert split == {("a", "conv"): 3.0, ("b", "pool"): 3.0, ("c", "copy"): 1.0}  # 2..4 split in halves
    assert sum(split.values()) == 7.0  # the union: [0, 6) and [8, 9)


def test_an_accelerators_own_time_per_step_is_its_ops_time_or_a_note_says_why_not():
    """On a TPU or GPU the spans are the device's ops: their time in the typical step is the device's own, beside
    the step's wall time (which holds the host's dispatch and the round trip)."""
    p = profile.summarize([Traced(0.0, 0.6e-3, [Span("fusion.3", "conv", 0.3e-3, 0.44e-3)])], 1.0, [])
    profile.on_device(p)
    assert p.device_s == pytest.approx(0.14e-3) and p.metrics()["profile_device_s"] == p.device_s
    empty = profile.summarize([Traced(0.0, 0.6e-3, [])], 1.0, [])
    profile.on_device(empty)
    assert empty.device_s is None and "profile_device_s" not in empty.metrics()
    assert empty.notes == ["the trace holds no op of the device: its own time per step is unknown"]


def test_a_tpus_trace_line_of_ops_and_a_gpus_streams_are_the_device_ops():
    """A TPU plane's "XLA Ops" line names each op by its event (its steps and modules lines are not ops); a GPU
    stream's kernels name theirs in their hlo_op stat."""
    from types import SimpleNamespace as N
    from experiments.measure.backends import jax_profile  # jax: its profiler's types are read duck-typed here

    def event(name, start, stats=()):
        return N(name=name, start_ns=start, duration_ns=10, stats=list(stats))

    data = N(planes=[
        N(name="/device:TPU:0", lines=[N(name="XLA Ops", events=[event("fusion.3", 100)]),
                                       N(name="XLA Modules", events=[event("jit_f", 90)]),
                                       N(name="Steps", events=[event("0", 90)])]),
        N(name="/device:GPU:0", lines=[N(name="Stream #1", events=[event("k", 200, [("hlo_op", "dot.1")])])]),
        N(name="/host:CPU", lines=[N(name="main", events=[event("fusion.9", 5, [("hlo_op", "fusion.9")])])])])
    assert jax_profile.device_ops(data) == [("XLA Ops", 100, 110, "fusion.3", ""), ("Stream #1", 200, 210, "dot.1", "")]


def test_the_most_typical_step_is_split_into_parts_that_sum_to_its_wall():
    """Not the step of median wall time (B, where a copy was preempted) but the one closest to each part's median."""
    a = Traced(0.0, 5.0, [Span("conv", "conv", 0.0, 3.0), Span("pool", "pool", 2.0, 4.0),  # overlap 2..3 halved
                          Span("late", "conv", 6.0, 9.0)])  # outside the step: clipped away
    b = Traced(10.0, 18.0, [Span("conv", "conv", 10.0, 13.0), Span("pool", "pool", 13.0, 14.0),
                            Span("copy", "copy", 14.0, 17.0)])
    c = Traced(20.0, 29.0, [Span("conv", "conv", 20.0, 26.0, part=True), Span("pool", "pool", 26.0, 27.0)])
    p = profile.summarize([a, b, c], 1.0, [])
    assert p.wall_s == 5.0 and p.step_walls_s == [5.0, 8.0, 9.0] and set(p.parts_s) == set(PARTS)
    assert p.parts_s["conv"] == 2.5 and p.parts_s["pool"] == 1.5 and p.parts_s["overhead"] == 1.0
    assert sum(p.parts_s.values()) == pytest.approx(p.wall_s)
    top = {o.name: o for o in p.top}
    assert top["conv"].calls == 1 and top["conv"].self_s == 3.0  # medians over the steps: 2.5, 3, 6 (a part)
    assert top["copy"].self_s == 0.0 and OpProfile.from_json(p.to_json()) == p
    assert "| `conv` | conv | 1 | 3000.000 | 60.0% |" in profile.top_markdown(p, "t")


def test_unknown_ops_above_the_bound_are_noted():
    p = profile.summarize([Traced(0.0, 1.0, [Span("mystery", "other", 0.0, 0.5), Span("c", "conv", 0.5, 1.0)])],
                          0.1, [])
    assert p.parts_s["other"] == 0.5 and "other is 50% of the op time" in p.notes[0]


def test_the_tables_speak_the_vocabulary():
    said = {c for table in (categories.TORCH, categories.TORCH_BACKWARD, categories.INDUCTOR,
                            categories.JAX_LAYERS, categories.JAX_PRIMITIVES) for _, c in table}
    said |= set(categories.TORCH_MODULES.values()) | {c for _, c in categories.HLO}
    said |= {c for _, c in categories.JAX_WHOLE_LAYERS}
    assert said <= set(CATEGORIES) | {"fill"} and "other" not in said  # other: only what no table knows
    assert set(PARTS) == set(CATEGORIES) | {"overhead"} and "pool" in CATEGORIES
    assert all(re.compile(p) for table in (categories.TORCH, categories.INDUCTOR) for p, _ in table)
    assert categories.first_match(categories.TORCH, "aten::conv2d") == "conv"
    assert categories.first_match(categories.INDUCTOR, "max_pool2d_with_indices_relu_1") == "pool"
    assert categories.first_match(categories.JAX_PRIMITIVES, "convert_element_type") == "copy"
    assert categories.first_match(categories.TORCH, "aten::unheard_of") == "other"
    assert categories.first_match(categories.TORCH, "aten::_scaled_dot_product_flash_attention_for_cpu") == "attention"
    assert categories.first_match(categories.TORCH, "aten::lstm") == "recurrent"
    assert categories.first_match(categories.TORCH, "aten::upsample_nearest2d") == "pool"
    assert categories.first_match(categories.TORCH, "aten::embedding") == "copy"
    assert categories.first_match(categories.TORCH_BACKWARD, "NativeLayerNormBackward0") == "norm"


def test_each_framework_has_a_profiler_that_mirrors_the_others():
    """`<name>_profile.py` beside each `<name>_backend.py`, with the same functions and parameters."""
    modules = [import_module(f"experiments.measure.backends.{t.name}_profile") for t in references()]
    for name in ("capture", "trace"):
        assert len({tuple(inspect.signature(getattr(m, name)).parameters) for m in modules}) == 1, name


def walk(layers: tuple):
    """Every layer record, nested ones (Residual, Concat) included."""
    for layer in layers:
        yield layer
        yield from walk(getattr(layer, "layers", ()))


def run_profile(tmp_path, fw: str, name: str, op: str, compile: bool, batch: int = 4, device: str = "cpu"):
    setup = Setup("fp32", device, compile=compile, memory_format=FORMAT[fw])
    backend = load(fw)
    backend.configure(setup)
    req = Request(fw, setup, {"name": name}, 0, budget("quick", warmup_s=0.01), (Point(batch, (op,)),))
    spec = tiny(name) if batch == 4 else models.load(name)
    return profile.profile_op(backend, spec, req, op, batch, tmp_path / op), spec


def check(r, spec, fw: str, op: str, out) -> OpProfile:
    """What holds for every profile: parts that sum to the step, bounded `other`, files that parse."""
    p = r.profile
    busy = p.wall_s - p.parts_s["overhead"]
    assert r.status == "ok" and set(p.parts_s) == set(PARTS) and min(p.parts_s.values()) >= 0
    assert sum(p.parts_s.values()) == pytest.approx(p.wall_s) and busy > 0
    assert p.parts_s["other"] <= categories.OTHER_BOUND * busy or (fw, spec.name) in categories.OTHER_ALLOWED, p.top
    assert len(p.step_walls_s) >= profile.STEPS[0] and p.wall_s in p.step_walls_s and len(p.top) <= profile.TOP
    if op == "training":
        assert p.parts_s["optimizer"] > 0
    events = json.loads(gzip.open(out / "trace.json.gz").read())["traceEvents"]
    assert sum(str(e.get("name", "")).startswith("nnbench.step#") for e in events) >= len(p.step_walls_s)
    assert (out / "top.md").read_text().startswith(f"# {spec.name} {op}")
    assert OpProfile.from_json((out / "profile.json").read_text()) == p
    return p


# Every op of the seed's models; the training step of the others (their forward, loss, backward and optimizer:
# every category their inference has too), where jax compiles a tiny transformer's step in 3-20 s.
CASES = [(fw, name, op) for fw in ("jax", "torch") for name in models.available() for op in OPS
         if name in SEEDS or op == "training"]


@pytest.mark.parametrize("fw,name,op", CASES)
def test_every_model_and_op_profiles_into_the_vocabulary(tmp_path, fw, name, op):
    """Each framework's default variant (jax-jit, torch-eager): every op found, `other` within its bound."""
    r, spec = run_profile(tmp_path, fw, name, op, compile=fw == "jax")
    if r.status == "skipped":
        assert op == "training" and not spec.trainable
        return
    p = check(r, spec, fw, op, tmp_path / op)
    if op != "inference" and spec.loss != "mean":
        assert p.parts_s["loss"] > 0
    for layer, category in ((models.Attention, "attention"), (models.LSTM, "recurrent"), (models.Upsample, "pool"),
                            (models.GroupNorm, "norm"), (models.LayerNorm, "norm")):
        if any(isinstance(x, layer) for x in walk(spec.layers)):
            assert p.parts_s[category] > 0, (layer.__name__, p.top)
    if fw == "jax":
        from jax.profiler import ProfileData  # the worker's own parser reads XLA's trace offline too

        plane = ProfileData.from_file(str(tmp_path / op / "trace.xplane.pb")).find_plane_with_name("/host:CPU")
        assert plane is not None
        assert (tmp_path / op / "program.txt").read_text().startswith("HloModule")
    else:
        assert not (tmp_path / op / "program.txt").exists()  # eager: there is no compiled program


# jax runs each primitive of an eager step as its own program, compiled at its first call: LeNet's training step
# (backward and optimizer too) takes seconds more than its inference.
@pytest.mark.parametrize("op", ["inference", pytest.param("training", marks=pytest.mark.slow)])
def test_jax_eager_profiles_by_primitive(tmp_path, op):
    r, spec = run_profile(tmp_path, "jax", "lenet", op, compile=False)
    p = check(r, spec, "jax", op, tmp_path / op)
    assert p.parts_s["conv"] > 0 and any("jax eager" in n for n in p.notes)


@pytest.mark.slow
def test_torch_compile_keeps_its_graph_and_code_and_its_kernels_are_ops(tmp_path):
    """Inductor's kernels are profiler ranges in the profiled program; the graph and code are one text to diff."""
    r, spec = run_profile(tmp_path, "torch", "lenet", "training", compile=True)
    p = check(r, spec, "torch", "training", tmp_path / "training")
    text = (tmp_path / "training" / "program.txt").read_text()
    assert "# ==== Dynamo's graphs" in text and "# ==== Inductor output code" in text and "cpp_fused" in text
    assert not re.search(r"__compiled_fn_\d+_[0-9a-f]{8}_", text)  # per-process ids are made stable
    assert any(o.name.startswith("graph_") and "cpp_fused" in o.name for o in p.top) and p.parts_s["pool"] > 0


@pytest.mark.gpu
@pytest.mark.parametrize("fw", ["jax", "torch"])
def test_gpu_profiles_count_kernel_time(tmp_path, fw):
    """On a GPU the ops are the kernels: the time inside them is the device's, overhead the rest of the step."""
    if not gpu_visible(fw):
        pytest.skip(f"{fw} sees no GPU")
    r, spec = run_profile(tmp_path, fw, "lenet", "training", compile=fw == "jax", batch=128, device="gpu")
    assert r.device.startswith("cuda")
    p = check(r, spec, fw, "training", tmp_path / "training")
    assert p.parts_s["conv"] > 0 and p.parts_s["matmul"] > 0

"""Both adapters through the Backend protocol on tiny sizes: devices, finite outputs, training progress, errors."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import models
from experiments.common.devices import Present
from experiments.measure.backends import Unavailable, Unsupported, choose, load, module
from experiments.common.config import OPS
from experiments.common.frameworks import references
from experiments.common.protocol import Setup
from tests.helpers import FORMAT, SEEDS, TORCH_COMPILED, gpu_visible, tiny

ADAPTERS = {t.name: module(t.name) for t in references()}  # the full adapters: every layer, op and compile mode
BATCH = 2
# torch.compile costs 1–20 s per graph on 2 cores (inductor, C++ codegen), so it runs on one MLP and one conv net
# only (TORCH_COMPILED; the conv net in the slow tier); the layers of the others are covered by the eager runs and by
# the parity tests. Every op of the seed's models runs in jax, jit and eager. Beyond the seeds XLA takes 3-40 s to
# compile one op of a tiny transformer or U-Net on 2 busy cores: jit runs training (the largest program;
# tests/measure/test_flops.py compiles their inference and grad, the parity tests run the grad), eager runs
# inference. torch eager runs every op of all.


def ops_of(name: str, fw: str, jit: bool) -> tuple[str, ...]:
    if name in SEEDS or fw == "torch":
        return OPS
    return ("training",) if jit else ("inference",)


def cases(name: str, fw: str, jit: bool) -> list:
    """The case's ops, those the fast tier (tests/conftest.py FAST_MODELS) runs apart from the rest: the MLP's
    inference compiled by torch (its other ops and the conv net's in the slow tier), and the conv net in jax's eager
    mode in the slow tier (tests/measure/test_profile.py profiles its inference eagerly in the fast one)."""
    ops, slow = ops_of(name, fw, jit), pytest.mark.slow
    if fw == "torch" and jit and name == TORCH_COMPILED[0]:
        return [pytest.param(name, fw, jit, ops[:1]), pytest.param(name, fw, jit, ops[1:], marks=slow)]
    if (fw, jit, name) in {("torch", True, TORCH_COMPILED[1]), ("jax", False, "lenet")}:
        return [pytest.param(name, fw, jit, ops, marks=slow)]
    return [pytest.param(name, fw, jit, ops)]


CASES = [case for name in models.available() for fw in ADAPTERS for jit in (False, True)
         if not (fw == "torch" and jit and name not in TORCH_COMPILED) for case in cases(name, fw, jit)]


def configured(fw: str, precision: str = "fp32", compile: bool = False):
    """A fresh backend set to the CPU, per test, so no test inherits another's device or precision."""
    backend = load(fw)
    assert backend.configure(Setup(precision, "cpu", compile=compile, memory_format=FORMAT[fw])) == "cpu"
    return backend


def host(fw: str, out) -> list[np.ndarray]:
    """float64 copies of every array leaf of an output, in pytree order (training: state first, loss last)."""
    if fw == "jax":
        import jax
        return [np.asarray(a, np.float64) for a in jax.tree.leaves(out)]
    import torch
    from torch.utils._pytree import tree_leaves
    return [t.detach().cpu().double().numpy() for t in tree_leaves(out) if isinstance(t, torch.Tensor)]


def run(step):
    out = step.fn()
    step.sync(out)
    return out


@pytest.mark.parametrize("name,fw,jit,ops", CASES)
def test_ops(name, fw, jit, ops):
    spec, backend = tiny(name), configured(fw, compile=jit)
    for op in ops:
        if op == "training" and not spec.trainable:
            with pytest.raises(Unsupported, match="constant weights"):
                backend.prepare(spec, op, BATCH, 0)
            continue
        step = backend.prepare(spec, op, BATCH, 0)
        out = step.fn()
        step.sync(out)
        assert step.device_of(out) == "cpu"
        first = host(fw, run(step))
        assert first and all(np.isfinite(a).all() for a in first), op
        if op == "inference":  # eval mode: deterministic, and the same function as the parity helper
            np.testing.assert_array_equal(host(fw, run(step))[0], first[0])
            x = spec.make_batch(BATCH, 0)[0]
            out = first[0] if fw == "jax" or not isinstance(spec.target, models.Image) else first[0].transpose(0, 2, 3, 1)
            np.testing.assert_allclose(out, ADAPTERS[fw].forward(spec, spec.init(0), x), rtol=1e-4, atol=1e-6)
        elif op == "grad":
            shapes = ([v.shape for k, v in spec.init(0).items() if not models.is_stat(k)] if spec.trainable
                      else [(BATCH, *spec.input_shape)])
            # loss, then the grads: as many numbers as the canonical weights (torch's LSTM stacks its gates)
            assert first[0].size == 1 and sum(a.size for a in first[1:]) == sum(int(np.prod(s)) for s in shapes)
        else:
            losses = [host(fw, run(step)) for _ in range(10)]
            assert losses[-1][-1] < first[-1], "10 Adam steps on one batch should lower its loss"
            assert not np.array_equal(losses[-1][0], first[0]), "the weights should change"
        if jit:  # compiled once: tests/measure/test_compile_once.py counts the other compiled cases
            assert step.compiles() == 1, op


@pytest.mark.parametrize("fw", ADAPTERS)
def test_gpu_request_without_gpu_fails_loudly(fw):
    if gpu_visible(fw):
        pytest.skip(f"{fw} sees a GPU")
    with pytest.raises(Unavailable, match="device=gpu"):
        load(fw).configure(Setup("fp32", "gpu", memory_format=FORMAT[fw]))


JAX, TORCH = ADAPTERS["jax"].PLATFORMS, ADAPTERS["torch"].PLATFORMS
TPU_HOST = Present(("TPU v5 lite",))
FAILED = "Backend 'tpu' failed to initialize: lockfile"


@pytest.mark.parametrize("platforms,wanted,seen,machine,chosen", [
    (JAX, "auto", {"tpu": None, "gpu": "none", "cpu": None}, TPU_HOST, "tpu"),  # jax: a TPU first...
    (JAX, "auto", {"tpu": "none", "gpu": None, "cpu": None}, Present(gpu=True), "gpu"),  # ...then a GPU...
    (JAX, "auto", {"tpu": "none", "gpu": "none", "cpu": None}, Present(), "cpu"),  # ...else the CPU
    (TORCH, "auto", {"gpu": "a CPU build", "cpu": None}, TPU_HOST, "cpu"),  # torch beside a TPU: the host CPU
    (JAX, "cpu", {"tpu": None, "cpu": None}, TPU_HOST, "cpu"),
    (JAX, "tpu", {"tpu": None, "cpu": None}, TPU_HOST, "tpu"),
])
def test_each_framework_takes_the_accelerator_it_sees(platforms, wanted, seen, machine, chosen):
    assert choose(platforms, wanted, seen, machine) == chosen


@pytest.mark.parametrize("platforms,wanted,seen,machine,said", [
    (JAX, "auto", {"tpu": FAILED, "cpu": None}, TPU_HOST,  # never a silent fallback to the CPU
     f"device=auto: this machine has a TPU v5 lite, but jax sees no TPU ({FAILED}): install jax's TPU build"),
    (JAX, "tpu", {"tpu": "no TPU", "cpu": None}, Present(), "device=tpu: jax sees no TPU (no TPU): install"),
    (TORCH, "tpu", {"gpu": None, "cpu": None}, TPU_HOST,
     "device=tpu: torch has no TPU backend: use device=auto, where torch takes GPU or else CPU, or device=cpu"),
    (TORCH, "auto", {"gpu": "a CPU build", "cpu": None}, Present(gpu=True),
     "device=auto: this machine has a GPU, but torch sees"),
])
def test_an_accelerator_asked_for_or_there_and_not_seen_is_one_line_naming_the_fix(platforms, wanted, seen, machine,
                                                                                   said):
    with pytest.raises(Unavailable) as e:
        choose(platforms, wanted, seen, machine)
    assert str(e.value).startswith(said) and "\n" not in str(e.value)


def test_a_probe_on_a_tpu_host_leaves_the_chip_closed_and_says_what_the_worker_will_record(monkeypatch):
    """The door's probe runs beside workers that may hold the chip: jax starts on the CPU only, and the record names
    the TPU the bus lists (its fingerprint is the worker's), fp32 matmuls as six bf16 passes."""
    import jax  # the probe's own import: this test runs in a process that has the CPU backend started already

    before = jax.config.jax_platforms
    jb = ADAPTERS["jax"]
    monkeypatch.setattr(jb, "present", lambda: TPU_HOST)
    monkeypatch.setenv("TPU_LIBRARY_PATH", "/opt/libtpu.so")
    try:
        backend = load("jax")
        assert backend.probe(Setup("fp32", "auto", memory_format="nhwc")) == "tpu:0"
        assert jax.config.jax_platforms == "cpu"
        env = backend.environment()
        assert (env["device_name"], env["device_platform"], env["precision_policy"]) == ("TPU v5 lite", "tpu",
                                                                                       "fp32/bf16x6")
        monkeypatch.delenv("TPU_LIBRARY_PATH")
        libtpu = jb.importlib.util.find_spec("libtpu")
        assert jb.plugged(TPU_HOST)["tpu"] == (None if libtpu else "no TPU plugin (libtpu) installed")
    finally:
        jax.config.update("jax_platforms", before)


# The conv net in each framework's cheap mode; jax's jit takes seconds more to compile it than the MLP, so the fast
# tier runs jax on the MLP.
@pytest.mark.parametrize("fw,name", [("torch", "lenet"), ("jax", "mlp_relu"),
                                     pytest.param("jax", "lenet", marks=pytest.mark.slow)])
@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_low_precision_runs_in_its_dtype(fw, name, precision):
    backend, spec = configured(fw, precision, compile=fw == "jax"), tiny(name)
    for op in ("inference", "training"):
        out = run(backend.prepare(spec, op, BATCH, 0))
        loss = out if op == "inference" else out[-1]
        assert str(loss.dtype).endswith({"bf16": "bfloat16", "fp16": "float16"}[precision])


@pytest.mark.slow
def test_fp64_in_a_subprocess():
    """jax_enable_x64 is global to a process, so fp64 runs apart from the other tests."""
    code = ("import models; from experiments.measure.backends import load; from experiments.common.protocol import Setup\n"
            "for fw, fmt in (('jax', 'nhwc'), ('torch', 'contiguous')):\n"
            "    b = load(fw); b.configure(Setup('fp64', 'cpu', compile=fw == 'jax', memory_format=fmt))\n"
            "    out = b.prepare(models.load('mlp_batchnorm'), 'training', 4, 0).fn()\n"
            "    print(fw, out[-1].dtype)\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.split() == ["jax", "float64", "torch", "torch.float64"]


@pytest.mark.parametrize("fw", ADAPTERS)
def test_environment_is_allow_listed(fw):
    allowed = {"jax": {"jax_version", "jaxlib_version", "flax_version", "optax_version", "device_name",
                       "device_platform", "cuda_version", "cudnn_version", "xla_flags"},
               "torch": {"torch_version", "torch_num_threads", "device_name", "device_platform", "cuda_version",
                         "cudnn_version", "torch_compile_backend"}}[fw]
    env = configured(fw).environment()
    assert f"{fw}_version" in env and set(env) <= allowed
    assert all(isinstance(v, str) for v in env.values())
    assert env["device_platform"] == "cpu"


@pytest.mark.gpu
@pytest.mark.parametrize("fw", ADAPTERS)
def test_gpu_fp32_is_full_fp32(fw):
    """On a GPU the outputs live on cuda:0, and fp32 means fp32 on both sides: TF32 off (docs/measuring.md, same arithmetic)."""
    if not gpu_visible(fw):
        pytest.skip(f"{fw} sees no GPU")
    backend = load(fw)
    try:
        assert backend.configure(Setup("fp32", "gpu", compile=True, memory_format=FORMAT[fw])) == "cuda:0"
        step = backend.prepare(tiny("mlp_relu"), "inference", 8, 0)
        assert step.device_of(step.fn()) == "cuda:0"
        a, b = np.random.default_rng(0).standard_normal((2, 1024, 1024)).astype(np.float32)
        if fw == "jax":
            import jax
            import jax.numpy as jnp
            assert jax.config.jax_default_matmul_precision == "highest"
            c = np.asarray(jnp.asarray(a) @ jnp.asarray(b))
        else:
            import torch
            assert not torch.backends.cuda.matmul.allow_tf32 and not torch.backends.cudnn.allow_tf32
            assert torch.get_float32_matmul_precision() == "highest"
            c = (torch.from_numpy(a).cuda() @ torch.from_numpy(b).cuda()).cpu().numpy()
        ref = a.astype(np.float64) @ b.astype(np.float64)
        assert np.abs(c - ref).max() / np.abs(ref).max() < 1e-5  # TF32 (10-bit mantissa) errs by about 1e-3
    finally:
        backend.configure(Setup("fp32", "cpu", memory_format=FORMAT[fw]))


MIRRORED = ("dtype", "make_model", "build", "to_input", "make_loss", "from_output", "forward", "loss_and_grads")


def test_adapters_mirror_each_other():
    """Reading one adapter teaches the other: the same helpers, with the same parameters."""
    import inspect

    def params(f):
        return list(inspect.signature(f).parameters)

    for name in MIRRORED:
        assert len({tuple(params(getattr(m, name))) for m in ADAPTERS.values()}) == 1, name
    for name in ("configure", "prepare", "matmul", "reset_peak_memory", "peak_memory", "environment"):
        assert len({tuple(params(getattr(m.Backend, name))) for m in ADAPTERS.values()}) == 1, name


@pytest.mark.parametrize("fw", ADAPTERS)
@pytest.mark.parametrize("layer", [models.Act("swish"), models.Flatten, "conv3d"], ids=["act", "class", "str"])
def test_unknown_layer_is_unsupported_in_every_adapter(fw, layer):
    spec = models.ModelSpec(name="odd", layers=(models.Dense(32, 8), layer), input=models.Array((32,)),
                            target=models.Array((8,)), loss="sse", batch_sizes={"inference": (2,)})
    with pytest.raises(Unsupported, match=f"the {fw} backend has no layer"):
        ADAPTERS[fw].make_model(spec, spec.init(0), "fp32", train=False)


@pytest.mark.parametrize("fw", ADAPTERS)
def test_integer_inputs_are_never_cast_and_only_images_are_permuted(fw):
    """Tokens and labels stay integers at any precision; an image becomes NCHW in torch, anything else keeps its
    layout (a (length, features) array is not an image)."""
    adapter = ADAPTERS[fw]
    tokens = np.arange(6, dtype=np.int32).reshape(2, 3)
    for precision in ("bf16", "fp32"):
        t = adapter.to_input(tokens, models.Tokens(3, 10), precision, None if fw == "jax" else "cpu")
        assert str(t.dtype) in ("int32", "torch.int64") and np.array_equal(np.asarray(t), tokens)
    image = np.zeros((2, 5, 4, 3), np.float32)
    array = np.zeros((2, 5, 4, 3), np.float32)
    device = None if fw == "jax" else "cpu"
    assert tuple(adapter.to_input(image, models.Image(5, 4, 3), "bf16", device).shape) == \
        ((2, 5, 4, 3) if fw == "jax" else (2, 3, 5, 4))
    assert tuple(adapter.to_input(array, models.Array((5, 4, 3)), "fp32", device).shape) == (2, 5, 4, 3)

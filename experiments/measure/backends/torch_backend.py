"""PyTorch adapter: nn layers built from the spec's numpy weights in NCHW / OIHW / (out, in) layouts.

compile=False: eager. compile=True: `torch.compile(dynamic=False)` of the forward (inference, under no_grad) or of
forward+loss (grad, training), whose backward AOTAutograd compiles too; the Adam step stays eager (foreach).
compile_mode=reduce-overhead adds CUDA graphs (GPUs only).

Images are in the declared memory format, inputs and weights alike: `contiguous` (NCHW, as users write it) or
`channels_last`. Never by accident: a (N, 28, 28, 1) batch transposed to NCHW keeps strides (784, 1, 28, 1),
which torch reads as channels_last, and oneDNN then took its NHWC kernels (LeNet bs32 inference 0.58 against
0.74 ms for the same model fed `torch.randn(32, 1, 28, 28)`, training 2.09 against 3.28 ms).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.utils._pytree import tree_leaves

from experiments.common.protocol import Setup
from experiments.measure.backends import Step, Unavailable, check_op
from experiments.measure.backends.torch_layers import dtype, make_model
from models import ModelSpec, is_stat

FORMATS = {"contiguous": torch.contiguous_format, "channels_last": torch.channels_last}


def to_input(a: np.ndarray, precision: str, device, memory_format: str = "contiguous") -> torch.Tensor:
    """Channels-last canonical batch -> an NCHW tensor whose strides are those of `memory_format` (images),
    or as is; made with fresh strides, so no size-1 dimension can leave the layout ambiguous."""
    src = torch.from_numpy(a)
    if a.ndim == 4:
        src = src.permute(0, 3, 1, 2)
    fmt = FORMATS[memory_format] if a.ndim == 4 else torch.contiguous_format
    return torch.empty(src.shape, dtype=dtype(precision), device=device, memory_format=fmt).copy_(src)


def make_loss(spec: ModelSpec, model: nn.Module):
    """loss(x, y) of the model, for autograd."""
    if spec.loss == "sse":
        return lambda x, y: ((model(x) - y) ** 2).sum()
    return lambda x, y: model(x).mean()


def forward(spec: ModelSpec, params: dict[str, np.ndarray], x: np.ndarray) -> np.ndarray:
    """Eval-mode output at fp32 on the CPU, for parity tests."""
    model = make_model(spec, params, "fp32", train=False)
    with torch.no_grad():
        return model(to_input(x, "fp32", "cpu")).numpy()


def loss_and_grads(spec: ModelSpec, params: dict[str, np.ndarray], x: np.ndarray, y: np.ndarray):
    """Train-mode loss and gradients in the canonical layout (w.r.t. x for constant-weight models)."""
    model = make_model(spec, params, "fp32", train=True)
    xt = to_input(x, "fp32", "cpu").requires_grad_(not spec.trainable)
    loss = make_loss(spec, model)(xt, to_input(y, "fp32", "cpu"))
    loss.backward()
    if not spec.trainable:
        return loss.item(), xt.grad.numpy()
    return loss.item(), {k: back(getattr(m, attr).grad.numpy()) for k, m, attr, back in model.links
                         if not is_stat(k)}


class Backend:
    def __init__(self):
        self.device = torch.device("cpu")
        self.setup = Setup("fp32", "cpu")

    def configure(self, setup: Setup) -> str:
        gpu = torch.cuda.is_available()
        if setup.device == "gpu" and not gpu:
            raise Unavailable("device=gpu but torch sees no GPU: install a CUDA build of torch "
                              "(https://pytorch.org/get-started) or use device=cpu")
        self.device = torch.device("cuda:0" if gpu and setup.device != "cpu" else "cpu")
        if setup.memory_format not in FORMATS:
            raise Unavailable(f"torch has no memory_format={setup.memory_format}: use framework.memory_format="
                              "contiguous or channels_last")
        if setup.compile_mode not in ("default", "reduce-overhead"):
            raise Unavailable(f"framework.compile_mode={setup.compile_mode} is not offered: use default or "
                              "reduce-overhead")
        if setup.compile_mode == "reduce-overhead" and (self.device.type != "cuda" or not setup.compile):
            raise Unavailable("framework.compile_mode=reduce-overhead is CUDA graphs: it needs a GPU (device=gpu) "
                              "and framework.compile=true")
        if setup.threads is not None and setup.threads < 1:
            raise Unavailable(f"framework.threads={setup.threads}: give a positive count, or null for torch's own")
        if setup.threads:
            torch.set_num_threads(setup.threads)  # before the first parallel op starts the OpenMP pool
        self.setup = setup
        torch.backends.cuda.matmul.allow_tf32 = setup.tf32  # fp32 means full fp32 unless asked, as on the jax side
        torch.backends.cudnn.allow_tf32 = setup.tf32
        torch.set_float32_matmul_precision("high" if setup.tf32 else "highest")
        return str(self.device)

    def prepare(self, spec: ModelSpec, op: str, batch: int, seed: int) -> Step:
        check_op(spec, op)
        s = self.setup
        graphs = torch._dynamo.utils.counters["stats"]
        compiled_before = graphs["unique_graphs"]
        if s.compile:
            torch._dynamo.reset()  # a fresh compile per batch size: no recompile limit, no dynamic shapes
            program = generated_code()
        mode = None if s.compile_mode == "default" else s.compile_mode
        jit = (lambda f: torch.compile(f, dynamic=False, mode=mode)) if s.compile else (lambda f: f)
        model = make_model(spec, spec.init(seed), s.precision, train=op != "inference")
        model = model.to(self.device, memory_format=FORMATS[s.memory_format])
        x, y = (to_input(a, s.precision, self.device, s.memory_format) for a in spec.make_batch(batch, seed))
        if op == "inference":
            infer = jit(model)

            def fn():
                with torch.no_grad():
                    return infer(x)
        elif op == "grad":
            loss = jit(make_loss(spec, model))
            wrt = list(model.parameters()) if spec.trainable else [x.requires_grad_()]

            def fn():
                value = loss(x, y)
                return value, torch.autograd.grad(value, wrt)
        else:
            loss = jit(make_loss(spec, model))
            opt = torch.optim.Adam(model.parameters(), lr=1e-3, foreach=True)
            state = (*model.parameters(), *model.buffers())  # updated in place by each step

            def fn():
                opt.zero_grad(set_to_none=True)
                value = loss(x, y)
                value.backward()
                opt.step()
                return state, value
        if mode == "reduce-overhead":
            fn = marked(fn)
        if not s.compile:
            return Step(fn, sync_of(self.device), device_of)
        return Step(fn, sync_of(self.device), device_of, compiles=lambda: graphs["unique_graphs"] - compiled_before,
                    program=program)

    def matmul(self, n: int) -> Step:
        a = torch.full((n, n), 1 / n, dtype=dtype(self.setup.precision), device=self.device)
        return Step(lambda: a @ a, sync_of(self.device), device_of)

    def cache_hits(self) -> int:
        counters = torch._dynamo.utils.counters  # FX graphs (Inductor) and joint graphs (AOTAutograd) from the cache
        return counters["inductor"]["fxgraph_cache_hit"] + counters["aot_autograd"]["autograd_cache_hit"]

    def reset_peak_memory(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)

    def peak_memory(self) -> int | None:
        return int(torch.cuda.max_memory_allocated(self.device)) if self.device.type == "cuda" else None

    def environment(self) -> dict[str, str]:
        cuda = self.device.type == "cuda"
        env = {"torch_version": torch.__version__, "torch_num_threads": str(torch.get_num_threads()),
               "device_name": torch.cuda.get_device_name(self.device) if cuda else "cpu",
               "device_platform": self.device.type,
               "torch_compile_backend": "inductor"}  # what compile=True uses; eager runs ignore it
        if torch.version.cuda:
            env["cuda_version"] = torch.version.cuda
        if cuda and torch.backends.cudnn.is_available():
            env["cudnn_version"] = str(torch.backends.cudnn.version())
        return env


def generated_code():
    """What Inductor generates from here on, as text: each Python module it loads (the wrapper that calls the
    kernels and the extern ops in order, with each kernel's source and the ATen ops it fuses)."""
    from torch._inductor.codecache import PyCodeCache  # Inductor is imported by processes that compile only

    before = {id(m) for m in PyCodeCache.modules}  # the cache is process-wide: earlier ops' modules are in it

    def program() -> str:
        return "".join(f"# ==== Inductor output code: {m.__file__}\n{Path(m.__file__).read_text()}\n"
                       for m in PyCodeCache.modules if id(m) not in before)

    return program


def marked(fn):
    """fn as one CUDA-graph step: marks where the previous call's outputs may be overwritten."""
    def step():
        torch.compiler.cudagraph_mark_step_begin()
        return fn()

    return step


def sync_of(device):
    """The Step's sync, chosen once per step so the timed call holds no device test: torch CPU ops return done."""
    return (lambda _: torch.cuda.synchronize()) if device.type == "cuda" else (lambda _: None)


def device_of(out) -> str:
    return str(next(t for t in tree_leaves(out) if isinstance(t, torch.Tensor)).device)

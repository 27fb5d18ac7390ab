"""PyTorch adapter: nn layers built from the spec's numpy weights in NCHW / OIHW / (out, in) layouts, or a user's
nn.Module from its builder; both measured alike.

compile=False: eager. compile=True: `torch.compile(dynamic=False)` of the forward (inference, under no_grad) or of
forward+loss (grad, training), whose backward AOTAutograd compiles too; the Adam step stays eager (foreach).
compile_mode=reduce-overhead adds CUDA graphs (GPUs only).

Images are in the declared memory format, inputs and weights alike: `contiguous` (NCHW, as users write it) or
`channels_last`. Never by accident: a (N, 28, 28, 1) batch transposed to NCHW keeps strides (784, 1, 28, 1),
which torch reads as channels_last, and oneDNN then took its NHWC kernels (LeNet bs32 inference 0.58 against
0.74 ms for the same model fed `torch.randn(32, 1, 28, 28)`, training 2.09 against 3.28 ms).
"""
from __future__ import annotations

import contextlib
import math
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils import flop_counter
from torch.utils._pytree import tree_leaves

from experiments.common.devices import present
from experiments.common.protocol import Setup
from experiments.measure.backends import Platforms, Step, Unavailable, choose, validate_op, validate_side
from experiments.measure.backends.torch_layers import dtype, make_model
from models import Image, Model, Network, is_stat

FORMATS = {"contiguous": torch.contiguous_format, "channels_last": torch.channels_last}
# Each loss on (output, target); cross-entropy over the last axis, the mean over samples and positions.
LOSSES = {
    "sse": lambda yhat, y: ((yhat - y) ** 2).sum(),
    "mean": lambda yhat, y: yhat.mean(),
    "cross_entropy": lambda yhat, y: F.cross_entropy(yhat.flatten(0, -2), y.flatten()),
}


def to_input(a: np.ndarray, of, precision: str, device, memory_format: str = "contiguous") -> torch.Tensor:
    """A canonical batch as torch takes it (`of`: what it is, models.Image, Tokens...): images channels-last ->
    NCHW with the strides of `memory_format`, made fresh so no size-1 dimension can leave the layout ambiguous;
    floats in the run's precision; integer tokens and labels as int64 (torch's index type: cross_entropy takes
    no other), never the run's precision."""
    src = torch.from_numpy(a)
    image = isinstance(of, Image)
    if image:
        src = src.permute(0, 3, 1, 2)
    kind = torch.int64 if np.issubdtype(a.dtype, np.integer) else dtype(precision)
    fmt = FORMATS[memory_format] if image else torch.contiguous_format
    return torch.empty(src.shape, dtype=kind, device=device, memory_format=fmt).copy_(src)


def count_params(model: nn.Module) -> int:
    """Trainable parameters of a built model, as torch counts them (those that require a gradient)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def build(spec: Model, seed: int, precision: str, train: bool) -> nn.Module:
    """The model in train or eval mode: the DSL's from its canonical weights, a user's from its torch builder
    (after torch.manual_seed(seed); its floating-point weights in the run's precision), on the CPU."""
    if not isinstance(spec, Network):
        return make_model(spec, spec.init(seed), precision, train)
    torch.manual_seed(seed)
    return spec.torch().to(dtype=dtype(precision)).train(train)


def make_loss(spec: Model, model: nn.Module):
    """loss(x, y) of the model, for autograd."""
    of = LOSSES[spec.loss]
    return lambda x, y: of(model(x), y)


def from_output(spec: Model, out: torch.Tensor) -> np.ndarray:
    """An output as a canonical numpy array: an image back to channels-last."""
    return (out.permute(0, 2, 3, 1) if isinstance(spec.target, Image) else out).detach().cpu().numpy()


def forward(spec: Model, params: dict[str, np.ndarray], x: np.ndarray) -> np.ndarray:
    """Eval-mode output at fp32 on the CPU, for parity tests."""
    model = make_model(spec, params, "fp32", train=False)
    with torch.no_grad():
        return from_output(spec, model(to_input(x, spec.input, "fp32", "cpu")))


def loss_and_grads(spec: Model, params: dict[str, np.ndarray], x: np.ndarray, y: np.ndarray):
    """Train-mode loss and gradients in the canonical layout (w.r.t. x for constant-weight models)."""
    model = make_model(spec, params, "fp32", train=True)
    xt = to_input(x, spec.input, "fp32", "cpu").requires_grad_(not spec.trainable)
    loss = make_loss(spec, model)(xt, to_input(y, spec.target, "fp32", "cpu"))
    loss.backward()
    if not spec.trainable:
        return loss.item(), xt.grad.numpy()
    return loss.item(), {k: back(getattr(m, attr).grad.numpy()) for k, m, attr, back in model.links
                         if not is_stat(k)}


# What device=auto takes, in order (beside a TPU, the host's CPU: torch has no TPU backend here), and how to give
# torch a GPU.
PLATFORMS = Platforms("torch", ("gpu", "cpu"), {
    "gpu": f"install its CUDA build (pip install torch=={torch.__version__.split('+')[0]} --index-url "
           "https://download.pytorch.org/whl/cu128, the README's GPU set-up)"})


def seen() -> dict[str, str | None]:
    """Per platform, None where torch opens it here, else why not."""
    cuda = "its CUDA build is installed, but it finds no GPU" if torch.version.cuda else "a CPU build"
    return {"gpu": None if torch.cuda.is_available() else cuda, "cpu": None}


class Backend:
    def __init__(self):
        self.device = torch.device("cpu")
        self.setup = Setup("fp32", "cpu")

    def configure(self, setup: Setup) -> str:
        platform = choose(PLATFORMS, setup.device, seen(), present())
        self.device = torch.device("cuda:0" if platform == "gpu" else "cpu")
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

    def prepare(self, spec: Model, op: str, batch: int, seed: int) -> Step:
        validate_op(spec, op)
        validate_side(spec, "torch")
        s = self.setup
        if s.compile:  # torch.compile's front end, imported only where it compiles (a second of CPU)
            graphs = torch._dynamo.utils.counters["stats"]
            compiled_before = graphs["unique_graphs"]
            torch._dynamo.reset()  # a fresh compile per batch size: no recompile limit, no dynamic shapes
            program = generated_code()
        mode = None if s.compile_mode == "default" else s.compile_mode
        jit = (lambda f: torch.compile(f, dynamic=False, mode=mode)) if s.compile else (lambda f: f)
        model = build(spec, seed, s.precision, train=op != "inference")
        model = model.to(self.device, memory_format=FORMATS[s.memory_format])
        x, y = spec.make_batch(batch, seed)
        x = to_input(x, spec.input, s.precision, self.device, s.memory_format)
        y = to_input(y, spec.target, s.precision, self.device, s.memory_format)
        fn = call_of(op, spec, model, jit, (x, y))
        if mode == "reduce-overhead":
            fn = marked(fn)
        if not s.compile:
            return Step(fn, sync_of(self.device), device_of, cost=lambda: count_flops(fn))
        return Step(fn, sync_of(self.device), device_of, compiles=lambda: graphs["unique_graphs"] - compiled_before,
                    program=program)

    def export(self, spec: Model, op: str, batch: int, seed: int, out: Path) -> list[Path]:
        """The op's program as torch.export saves it (`out`.pt2, the batch its example inputs), for a script with
        torch alone: the forward (inference), or forward and loss (grad, training); no_grad, autograd and Adam are
        the script's, as `call_of` adds them here."""
        validate_op(spec, op)
        validate_side(spec, "torch")
        s = self.setup
        model = build(spec, seed, s.precision, train=op != "inference")
        model = model.to(self.device, memory_format=FORMATS[s.memory_format])
        x, y = spec.make_batch(batch, seed)
        x = to_input(x, spec.input, s.precision, self.device, s.memory_format)
        y = to_input(y, spec.target, s.precision, self.device, s.memory_format)
        program, args = (model, (x,)) if op == "inference" else (WithLoss(model, LOSSES[spec.loss]), (x, y))
        path = out.with_suffix(".pt2")
        torch.export.save(torch.export.export(program, args), path)
        return [path]

    def matmul(self, n: int) -> Step:
        a = torch.full((n, n), 1 / n, dtype=dtype(self.setup.precision), device=self.device)
        return Step(lambda: a @ a, sync_of(self.device), device_of)

    def cache_hits(self) -> int:
        counters = torch._dynamo.utils.counters  # FX graphs (Inductor) and joint graphs (AOTAutograd) from the cache
        return counters["inductor"]["fxgraph_cache_hit"] + counters["aot_autograd"]["autograd_cache_hit"]

    def probe(self, setup: Setup) -> str:
        """`configure`'s answer for the door: torch opens no device only one process may hold."""
        return self.configure(setup)

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


class WithLoss(nn.Module):
    """forward(x, y) is the model's loss: what grad and training differentiate, as one exported program."""

    def __init__(self, model: nn.Module, loss):
        super().__init__()
        self.model, self.loss = model, loss

    def forward(self, x, y):
        return self.loss(self.model(x), y)


def call_of(op: str, spec: Model, model: nn.Module, jit, batch: tuple[torch.Tensor, torch.Tensor]):
    """One call of `op` on the model and the batch (x, y) as they sit on the device, the forward (or forward and loss)
    through `jit` (torch.compile, or as it is): the output, or the loss and the gradients, or one Adam step."""
    x, y = batch
    if op == "inference":
        infer = jit(model)

        def fn():
            with torch.no_grad():
                return infer(x)
        return fn
    loss = jit(make_loss(spec, model))
    if op == "grad":
        wrt = [p for p in model.parameters() if p.requires_grad] if spec.trainable else [x.requires_grad_()]

        def fn():
            value = loss(x, y)
            return value, torch.autograd.grad(value, wrt)
        return fn
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, foreach=True)
    state = (*model.parameters(), *model.buffers())  # updated in place by each step

    def fn():
        opt.zero_grad(set_to_none=True)
        value = loss(x, y)
        value.backward()
        opt.step()
        return state, value
    return fn


class _GlobalOnly(contextlib.nullcontext):
    """All that FlopCounterMode asks of its module tracker when only the global total is kept."""

    parents = {"Global"}


def count_flops(fn) -> int:
    """torch's FlopCounterMode around one eager call of `fn`: 2 FLOPs per multiply-add of its matmuls and
    convolutions (and of the formulas below), nothing elementwise.

    Its per-module tracker is swapped for a no-op: its hooks break torch.autograd.grad w.r.t. a leaf input
    (matmul_chain's grad: "A leaf node was passed to _will_engine_execute_node", pytorch/pytorch#131753), and
    only the global total is wanted. Attention's inference fast path (nn.MultiheadAttention and
    nn.TransformerEncoderLayer in eval mode without grad) is off while counting: its fused kernels have no formula
    (it counted a 2-layer encoder's inference as its classifier's alone), and the unfused path is the same math.
    """
    counter = flop_counter.FlopCounterMode(display=False)
    counter.mod_tracker = _GlobalOnly()
    fastpath = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)
    try:
        with counter:
            fn()
    finally:
        torch.backends.mha.set_fastpath_enabled(fastpath)
    return counter.get_total_flops()


# The counter has no formula for the CPU's fused attention and LSTM kernels (it counted 0 for both): these are
# torch's own formulas for its GPU attention kernels (both bmm's of the scores and of the values, and the four of
# their gradients), and the LSTM's matmuls (4 gates × (input + hidden) per step; the backward twice that: the
# weights' gradients and those of the input and the previous step). torch calls a formula with the shapes of the op's
# arguments, and `out_shape=` among its keywords, which these leave in **kwargs.
def _sdpa(query_shape, key_shape, value_shape, *args, **kwargs) -> int:
    return flop_counter.sdpa_flop_count(query_shape, key_shape, value_shape)


def _sdpa_backward(grad_out_shape, query_shape, key_shape, value_shape, *args, **kwargs) -> int:
    return flop_counter.sdpa_backward_flop_count(grad_out_shape, query_shape, key_shape, value_shape)


def _lstm(input_shape, w_ih_shape, w_hh_shape, *args, **kwargs) -> int:
    return 2 * math.prod(input_shape[:-1]) * w_ih_shape[0] * (w_ih_shape[1] + w_hh_shape[1])


def _lstm_backward(input_shape, w_ih_shape, w_hh_shape, *args, **kwargs) -> int:
    return 2 * _lstm(input_shape, w_ih_shape, w_hh_shape)


for _ops, _formula in (([torch.ops.aten._scaled_dot_product_flash_attention_for_cpu], _sdpa),
                       ([torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward], _sdpa_backward),
                       ([torch.ops.aten.mkldnn_rnn_layer], _lstm),
                       ([torch.ops.aten.mkldnn_rnn_layer_backward], _lstm_backward)):
    if _ops[0] not in flop_counter.flop_registry:  # a later torch may count them itself
        flop_counter.register_flop_formula(_ops)(_formula)


_stock_conv_backward = flop_counter.conv_backward_flop.__wrapped__  # on shapes, as registered formulas see them


def _grouped_conv_backward(grad_out_shape, x_shape, w_shape, *args, out_shape=None, **kwargs) -> int:
    """torch's formula with the weight gradient's count divided by the groups, as pytorch/pytorch#183405 fixes:
    the stock one counts a depthwise conv's weight gradient as a dense conv's (dscnn's grad at 8 channels:
    4,290,304 against 2,274,304 counted from its layers)."""
    groups, output_mask = args[6], args[7]
    count = _stock_conv_backward(grad_out_shape, x_shape, w_shape, *args, out_shape=out_shape, **kwargs)
    if groups > 1 and output_mask[1]:
        def t(shape):
            return [shape[1], shape[0], *shape[2:]]

        weight = flop_counter.conv_flop_count(t(x_shape), t(grad_out_shape), t(w_shape))
        count -= weight - weight // groups
    return count


def _counts_groups() -> bool:
    """Whether this torch's formula already divides the weight gradient by the groups (a 1×1 depthwise conv of 2
    channels on one pixel: 4 FLOPs for the weight gradient, 8 if counted as dense)."""
    return _stock_conv_backward([1, 2, 1, 1], [1, 2, 1, 1], [2, 1, 1, 1], None, [1, 1], [0, 0], [1, 1], False, [0, 0],
                                2, [False, True, False], out_shape=[None, [2, 1, 1, 1]]) == 4


if not _counts_groups():
    flop_counter.flop_registry[torch.ops.aten.convolution_backward] = flop_counter.shape_wrapper(_grouped_conv_backward)


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

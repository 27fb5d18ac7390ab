"""Reference runner for seed 000's TIMING lines (runners/README.md), in plain Python + numpy.

Times seed 000's 7-layer MLP (Dense 32→256, 5× Dense 256→256, Dense 256→10, relu) in numpy: `inference` is a
forward pass, `training` a forward pass, the loss sum((ŷ − y)²), its backward pass and one Adam step (lr 1e-3).
Prints SAMPLES and TIMING (median) lines per op × batch size, and METADATA `<name> device` and `<name> version`
(the numpy version), on stdout; errors are one line on stderr with exit status 2:

    python runners/reference_runner.py --model mlp_relu --ops inference,training --batch-sizes 2,8,32
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

MODELS = {"mlp_relu": (32, 256, 256, 256, 256, 256, 256, 10)}  # layer widths
OPS = ("inference", "training")
DTYPES = {"fp32": np.float32, "fp64": np.float64, "fp16": np.float16}


class Unsupported(Exception):
    """A request this runner can't measure; the message names what it can."""


def init(widths: tuple[int, ...], dtype, seed: int = 0) -> list[np.ndarray]:
    """Kernels (in, out) and biases, uniform ±1/sqrt(fan-in) as torch and nnbench initialise them."""
    rng = np.random.default_rng(seed)
    params = []
    for din, dout in zip(widths, widths[1:]):
        bound = din**-0.5
        params += [rng.uniform(-bound, bound, (din, dout)).astype(dtype),
                   rng.uniform(-bound, bound, dout).astype(dtype)]
    return params


def forward(params: list[np.ndarray], x: np.ndarray) -> list[np.ndarray]:
    """Every layer's output, the input first: relu after all but the last Dense."""
    hs = [x]
    for i in range(0, len(params), 2):
        h = hs[-1] @ params[i] + params[i + 1]
        hs.append(np.maximum(h, 0, out=h) if i + 2 < len(params) else h)
    return hs


def loss_and_grads(params: list[np.ndarray], x: np.ndarray, y: np.ndarray) -> tuple[float, list[np.ndarray]]:
    """sum((ŷ − y)²) and its gradient for each parameter (backpropagation by hand)."""
    hs = forward(params, x)
    d = hs[-1] - y
    loss = float(np.sum(d * d))
    d = 2 * d
    grads: list[np.ndarray] = [np.empty(0)] * len(params)
    for i in range(len(params) - 2, -1, -2):
        h = hs[i // 2]
        grads[i], grads[i + 1] = h.T @ d, d.sum(axis=0)
        if i:
            d = (d @ params[i].T) * (h > 0)  # h is the relu output: its gradient is where it is positive
    return loss, grads


@dataclass
class Adam:
    params: list[np.ndarray]
    lr: float = 1e-3
    b1: float = 0.9
    b2: float = 0.999
    eps: float = 1e-8
    t: int = 0
    m: list[np.ndarray] = field(init=False)
    v: list[np.ndarray] = field(init=False)

    def __post_init__(self):
        self.m = [np.zeros_like(p) for p in self.params]
        self.v = [np.zeros_like(p) for p in self.params]

    def step(self, grads: list[np.ndarray]) -> None:
        self.t += 1
        c1, c2 = 1 - self.b1**self.t, 1 - self.b2**self.t
        for p, g, m, v in zip(self.params, grads, self.m, self.v):
            m *= self.b1
            m += (1 - self.b1) * g
            v *= self.b2
            v += (1 - self.b2) * g * g
            p -= (self.lr / c1) * m / (np.sqrt(v / c2) + self.eps)


def prepare(model: str, op: str, batch: int, dtype, seed: int = 0) -> Callable[[], object]:
    """The timed callable: setup (weights, data, optimizer state) stays outside it."""
    widths = MODELS[model]
    params = init(widths, dtype, seed)
    rng = np.random.default_rng([seed, batch])
    x = rng.standard_normal((batch, widths[0])).astype(dtype)
    y = rng.standard_normal((batch, widths[-1])).astype(dtype)
    if op == "inference":
        return lambda: forward(params, x)[-1]
    adam = Adam(params)
    return lambda: adam.step(loss_and_grads(params, x, y)[1])


def measure(fn: Callable[[], object], budget_s: float, min_block_s: float = 1e-3, min_samples: int = 5,
            clock: Callable[[], float] = time.perf_counter) -> list[float]:
    """Per-call seconds: calls timed in blocks of at least `min_block_s`, for about `budget_s` after a warm-up."""
    for _ in range(3):
        fn()
    block, start = 1, clock()
    fn()
    while clock() - start < min_block_s and block < 1 << 20:  # numpy calls can be microseconds: grow the block
        block *= 2
        start = clock()
        for _ in range(block):
            fn()
    samples, end = [], clock() + budget_s
    while len(samples) < min_samples or clock() < end:
        start = clock()
        for _ in range(block):
            fn()
        samples.append((clock() - start) / block)
    return samples


def csv(kind):
    """An argparse type for comma-separated values, as nnbench expands {ops} and {batch_sizes}."""
    return lambda text: [kind(v) for v in text.split(",") if v]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, help=f"one of {', '.join(MODELS)}")
    p.add_argument("--ops", type=csv(str), default=list(OPS), help="comma-separated: inference,training")
    p.add_argument("--batch-sizes", type=csv(int), required=True, help="comma-separated, e.g. 2,8,32")
    p.add_argument("--precision", default="fp32", help=f"one of {', '.join(DTYPES)}")
    p.add_argument("--device", default="cpu", help="cpu (auto means cpu: numpy runs on the CPU)")
    p.add_argument("--name", default="Reference", help="the framework name in the lines")
    p.add_argument("--budget-s", type=float, default=0.2, help="sampling time per op and batch size")
    a = p.parse_args(argv)
    try:
        if a.model not in MODELS:
            raise Unsupported(f"model {a.model!r} is not supported: use one of {', '.join(MODELS)}")
        if unknown := [op for op in a.ops if op not in OPS]:
            raise Unsupported(f"op {unknown[0]!r} is not supported: use {', '.join(OPS)}")
        if a.precision not in DTYPES:
            raise Unsupported(f"precision {a.precision!r} is not supported by numpy: use one of {', '.join(DTYPES)}")
        if a.device not in ("cpu", "auto"):
            raise Unsupported(f"device {a.device!r} is not supported: numpy runs on the CPU (use cpu or auto)")
        if not a.batch_sizes or min(a.batch_sizes) < 1:
            raise Unsupported(f"batch sizes must be positive integers (got {a.batch_sizes})")
    except Unsupported as e:
        print(f"reference_runner: error: {e}", file=sys.stderr)
        return 2
    print(f"METADATA\t{a.name} device\tcpu\nMETADATA\t{a.name} version\t{np.__version__}", flush=True)
    for op in a.ops:
        for batch in a.batch_sizes:
            s = measure(prepare(a.model, op, batch, DTYPES[a.precision]), a.budget_s)
            point = f"{a.name}\t{a.model}\t{op}\t{batch}"  # repr: the shortest text that reads back exactly
            print(f"SAMPLES\t{point}\t{','.join(map(repr, s))}\nTIMING\t{point}\t{statistics.median(s)!r}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

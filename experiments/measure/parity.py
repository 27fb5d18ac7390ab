"""Whether two frameworks compute the same function for one model, once, before its points are trusted: a user's
network has its torch weights copied into its Flax module through its weight map, then the eval-mode outputs, the
loss and every mapped parameter's gradient are compared at fp32 on the CPU (a model of the layer DSL: from its
canonical weights, as tests/measure/test_parity.py does). With its FLOPs counted by one framework for both
(`counted`), it is `python -m experiments.measure.parity [--flops-only] MODEL_JSON [OP:BATCH ...]`: it imports and
configures both frameworks, so it runs in a process of its own, never in a measuring worker. With --flops-only
(parity=false) it only counts: the frameworks are neither configured nor run to compare them, and a network is
loaded as a worker loads it, only the counting framework's side built.

Eval mode, because there both frameworks are deterministic: dropout is off and BatchNorm reads its running
statistics. No framework can match another's dropout stream, so train-mode randomness is not compared.
"""
from __future__ import annotations

import dataclasses
import json
import sys
from dataclasses import dataclass, field

import numpy as np

import models
from experiments.common.protocol import Json
from experiments.common.frameworks import built_with, declared, every, param_counts, references, traits
from experiments.measure.backends import load, module
from experiments.measure.flops import flops, source
from models import Model, Network, is_stat

SIDES = tuple(t.name for t in references())  # the frameworks compared
TOLERANCE = 1e-4  # the largest error of any compared tensor, relative to the largest magnitude in it (as the tests)
# A gradient is compared relative to at least this fraction of the largest gradient of any parameter (an absolute
# tolerance of 1e-6 of it, as tests/measure/test_parity.py): a conv bias before a BatchNorm in training mode has a
# zero gradient, which each framework computes as rounding noise (dscnn's 24.bias: ~1e-9 on both sides, 2.2 apart
# relative to itself, beside kernel gradients of ~1e-3).
GRAD_FLOOR = 1e-2
# The batch the frameworks are compared at: at least CHECK_BATCH, the sweep's smallest batch where larger (the
# function at a batch it measured), at most CHECK_MAX (the check runs on the CPU at fp32, beside the sweep). At a
# batch of 2, gradients through training-mode BatchNorm are float32 rounding noise: the seed's mlp_batchnorm read
# 0.kernel 0.81 apart between the frameworks, and matmul_chain's output 2.8e-4 (fp32 sums over its widths); at 8,
# 1.5e-5 and 3.2e-5, every built-in model within the tolerance (tests/measure/test_parity.py checks at 8 too).
CHECK_BATCH, CHECK_MAX = 8, 64


@dataclass(frozen=True)
class Parity(Json):
    """ok: every compared tensor within TOLERANCE; failed: one is not, or a side could not run; unchecked: nothing
    to compare (a single framework, or no weight map)."""

    status: str  # ok, failed or unchecked
    worst: float | None = None  # the largest relative error seen
    where: str = ""  # the tensor it was seen in: output, loss, or "<flax path> <- <torch name>" (a gradient)
    reason: str = ""  # why unchecked, or what failed
    params: dict[str, int] = field(default_factory=dict)  # trainable parameters per framework, as each side counts
    batch: int | None = None  # the batch size it compared at (`check_batch`; None: nothing was run)


@dataclass(frozen=True)
class FlopCount(Json):
    op: str
    batch: int
    flops: int
    source: str  # flops_source: dsl, declared, torch or xla


@dataclass(frozen=True)
class Proof(Json):
    """What the once-per-sweep process answers for one model."""

    parity: Parity
    flops: list[FlopCount]


def relative(a: np.ndarray, b: np.ndarray, floor: float = 0.0) -> float:
    """max |a − b| relative to max |b| (b: the torch side) or `floor` if larger, 0 where both are zero."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    scale = max(np.abs(b).max() if b.size else 0.0, floor)
    return float(np.abs(a - b).max() / scale) if scale else float(np.abs(a - b).max() if a.size else 0.0)


def verdict(errors: dict[str, float], params: dict[str, int]) -> Parity:
    where = max(errors, key=errors.get)
    ok = errors[where] <= TOLERANCE
    return Parity("ok" if ok else "failed", errors[where], where,
                  "" if ok else f"{where} differs by {errors[where]:.2g} (tolerance {TOLERANCE:g})", params)


def check_batch(batches: list[int]) -> int:
    """The batch size a sweep's model is compared at, from the batch sizes the sweep measures (CHECK_BATCH)."""
    return min(max(CHECK_BATCH, min(batches, default=CHECK_BATCH)), CHECK_MAX)


def check(spec: Model, seed: int = 0, batch: int = CHECK_BATCH) -> Parity:
    """Compare the two frameworks on one batch; both backends are configured for the CPU at fp32 first."""
    if isinstance(spec, Network):
        if len(declared(spec)) < 2:
            return Parity("unchecked", reason=f"only {declared(spec)[0].name} is declared: nothing to "
                          "compare with", params=param_counts(spec))
        if spec.weights is None:
            return Parity("unchecked", reason="no weight map (Network.weights): the two sides' weights can't be "
                          "made equal", params=param_counts(spec))
    for framework in SIDES:
        load(framework).configure(traits(framework).smoke)
    try:
        got = network(spec, seed, batch) if isinstance(spec, Network) else layers(spec, seed, batch)
    except Exception as e:  # the user's code, or a framework refusing it: a failed check, said in one line
        got = Parity("failed", reason=f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0][:300]}")
    return dataclasses.replace(got, batch=batch)


def layers(spec: models.ModelSpec, seed: int, batch: int) -> Parity:
    jb, tb = (module(name) for name in SIDES)
    params, (x, y) = spec.init(seed), spec.make_batch(batch, seed)
    errors = {"output": relative(jb.forward(spec, params, x), tb.forward(spec, params, x))}
    la, ga = jb.loss_and_grads(spec, params, x, y)
    lb, gb = tb.loss_and_grads(spec, params, x, y)
    errors["loss"] = relative(la, lb)
    if spec.trainable:
        floor = GRAD_FLOOR * max(float(np.abs(g).max()) for g in gb.values() if np.size(g))
        errors |= {k: relative(ga[k], gb[k], floor) for k in gb}
    else:
        errors["input"] = relative(ga, gb)
    count = spec.param_count()
    return verdict(errors, dict.fromkeys(SIDES, count))


def network(net: Network, seed: int, batch: int) -> Parity:
    import jax  # this process compares both frameworks
    import torch
    from flax import nnx

    fj, ft = built_with("flax").name, built_with("torch").name  # the two builders its weight map joins
    jb, tb = module(fj), module(ft)
    tmodel = tb.build(net, seed, "fp32", train=False)
    fmodel = jb.build(net, seed, "fp32", train=False)
    mapping = net.weight_map()
    torch_values = {k: v.detach().numpy() for k, v in [*tmodel.named_parameters(), *tmodel.named_buffers()]}
    state = [(path, var.replace(jax.numpy.asarray(mapping[key].read(key, torch_values[mapping[key].name])))
              if (key := ".".join(map(str, path))) in mapping else var)
             for path, var in nnx.to_flat_state(nnx.state(fmodel))]
    nnx.update(fmodel, nnx.from_flat_state(state))
    params = {fj: jb.count_params(fmodel), ft: tb.count_params(tmodel)}

    x, y = net.make_batch(batch, seed)
    xt, yt = tb.to_input(x, net.input, "fp32", "cpu"), tb.to_input(y, net.target, "fp32", "cpu")
    xj, yj = jb.to_input(x, net.input, "fp32", None), jb.to_input(y, net.target, "fp32", None)
    graphdef, p, rest = jb.split(fmodel)
    with torch.no_grad():
        out_t = tb.from_output(net, tmodel(xt))
    out_j = jb.from_output(net, jax.jit(lambda p, rest, x: nnx.merge(graphdef, p, rest)(x))(p, rest, xj))
    if out_j.shape != out_t.shape:
        return Parity("failed", reason=f"the outputs differ in shape: {fj} {out_j.shape}, {ft} {out_t.shape} "
                      "(images: jax NHWC, torch NCHW)", params=params)
    errors = {"output": relative(out_j, out_t)}

    loss_t = tb.make_loss(net, tmodel)(xt, yt)
    loss_t.backward()
    loss_j, grads = jax.jit(jb.make_grad(net, jb.make_loss(net, fmodel)))(p, rest, xj, yj)
    errors["loss"] = relative(float(loss_j), float(loss_t.detach()))
    grads = {".".join(map(str, path)): np.asarray(v.get_value()) for path, v in nnx.to_flat_state(grads)}
    torch_grads = {n: p.grad.numpy() for n, p in tmodel.named_parameters() if p.grad is not None}
    compared = {key: e for key, e in mapping.items() if key in grads and e.name in torch_grads and not is_stat(key)}
    floor = GRAD_FLOOR * max((float(np.abs(torch_grads[e.name]).max()) for e in compared.values()), default=0.0)
    for key, e in compared.items():  # each reading only moves values: it reads torch's gradient as it read the weight
        errors[f"{key} <- {e.label()}"] = relative(grads[key], e.read(key, torch_grads[e.name]), floor)
    return verdict(errors, params)


def counted(spec: Model, op: str, batch: int, seed: int = 0) -> FlopCount:
    """FLOPs of one call, one number for both frameworks, and where it comes from (`flops.source`): a user's
    network without a declared count is counted by one framework for all (torch's FlopCounterMode on an eager
    call, else XLA's cost analysis of the jitted step, on the CPU at fp32), configured here for it."""
    where = source(spec)
    if where in ("dsl", "declared"):
        return FlopCount(op, batch, flops(spec, op, batch), where)
    framework = next(t for t in every() if t.counter == where)
    backend = load(framework.name)
    backend.configure(framework.smoke)  # torch eager, jax jit: where each framework has its count
    return FlopCount(op, batch, backend.prepare(spec, op, batch, seed).cost(), where)


NOT_ASKED = Parity("unchecked", reason="not asked (--flops-only)")


def prove(spec: Model, points: list[tuple[str, int]], seed: int = 0, parity: bool = True) -> Proof:
    """Parity (unless not asked) at the points' `check_batch`, and the FLOPs of each (op, batch) from one source for
    both frameworks."""
    checked = check(spec, seed, check_batch([batch for _, batch in points])) if parity else NOT_ASKED
    return Proof(checked, [counted(spec, op, batch, seed) for op, batch in points])


def main(argv: list[str]) -> int:
    """`[--flops-only] MODEL_JSON [OP:BATCH ...]`: the model as models.load takes it ({"name": ..., keys}); prints
    one Proof."""
    flops_only = argv[:1] == ["--flops-only"]
    model, *asked = argv[flops_only:]
    spec = (models.declared if flops_only else models.load)(**json.loads(model))
    points = [(op, int(b)) for op, _, b in (a.partition(":") for a in asked)]
    print(prove(spec, points, parity=not flops_only).to_json())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

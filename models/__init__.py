"""Models: layer records, the data a model is fed and judged on, the declarations (`ModelSpec` for the layer DSL,
`Network` for a user's own torch/Flax NNX modules), and `load(name)`: a file of this package, an installed package's
entry point (group `nnbench.models`), or `name="file"` with `path=`."""
from __future__ import annotations

import dataclasses
import hashlib
import importlib.metadata
import importlib.util
import inspect
import math
import pkgutil
import sys
import threading
from dataclasses import dataclass, field
from importlib import import_module
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np

# a weight map's entries and the maps of the layers both frameworks have, for a user's build() (models.From, ...)
from models._weights import LSTM_GATES, Entry, From, attention, encoder_layer, entry, lstm, lstm_name

# Parameters are a flat dict {"<layer index path>.<name>": float32 array}, e.g. "0.kernel", "2.3.scale",
# "1.1.qkv.kernel": Dense/Conv "kernel" (in, out) / HWIO and "bias"; BatchNorm "scale", "bias" and running
# "mean", "var"; LayerNorm/GroupNorm "scale", "bias", RMSNorm "scale"; Embed/PosEmbed "embedding"; ClassToken
# "token"; Attention "qkv.kernel" (d, 3d: q, k, v side by side), "qkv.bias", "out.kernel", "out.bias"; LSTM
# "cell.<ii|if_|ig|io>.kernel" (in, h) and "cell.<hi|hf|hg|ho>.kernel" (h, h) with their "bias" (one per gate: flax's
# LSTMCell); MatmulChain "w1", "b1", "w2", "b2". Inputs are channels-last and Flatten enumerates (h, w, c) row-major.
STATS = ("mean", "var")  # BatchNorm running statistics: state, not trainable parameters
# The ops a batch-size list may name: the same names as experiments.common.config.OPS (tests/models checks it).
OPS = ("inference", "training", "grad")
ENTRY_POINTS = "nnbench.models"  # the entry-point group an installed package declares its networks in
FILE = "file"  # model=file model.path=./mynet.py: a network from one file


# ---- the layer DSL: each record is built natively by every backend (experiments/measure/backends/*_layers.py)

@dataclass(frozen=True)
class Dense:
    din: int
    dout: int  # on (..., din): every position of a sequence alike


@dataclass(frozen=True)
class Conv:
    cin: int
    cout: int
    k: int | tuple[int, int]  # kernel (square, or (kh, kw))
    stride: int = 1
    pad: int | tuple[int, int] = 0  # symmetric zero padding per axis; 0 is Flux's default 'valid'
    bias: bool = True
    groups: int = 1  # grouped convolution; groups == cin == cout: depthwise


@dataclass(frozen=True)
class BatchNorm:
    """eps 1e-5; running = 0.9·running + 0.1·batch (torch momentum 0.1 == flax momentum 0.9)."""

    c: int


@dataclass(frozen=True)
class LayerNorm:
    """eps 1e-5 (torch's default; flax's is 1e-6) and the two-pass variance on both sides."""

    d: int


@dataclass(frozen=True)
class RMSNorm:
    """x / sqrt(mean(x²) + 1e-6) · scale, no bias (torch's default eps is the dtype's epsilon: set on both sides)."""

    d: int


@dataclass(frozen=True)
class GroupNorm:
    """`groups` groups of consecutive channels, eps 1e-5 (flax's default is 1e-6), two-pass variance."""

    groups: int
    c: int


@dataclass(frozen=True)
class Act:
    fn: str  # relu; gelu_tanh (the tanh approximation, as Flux prints); gelu (exact, erf); silu


@dataclass(frozen=True)
class MaxPool:
    k: int  # window and stride


@dataclass(frozen=True)
class Upsample:
    k: int  # nearest-neighbour, by an integer factor per axis: each pixel becomes a k×k block


@dataclass(frozen=True)
class Flatten:
    pass


@dataclass(frozen=True)
class GlobalMeanPool:
    pass  # (h, w, c) -> (c,)


@dataclass(frozen=True)
class Mean:
    pass  # everything -> one scalar, seed 004's final o.mean()


@dataclass(frozen=True)
class Residual:
    layers: tuple  # x + layers(x), no activation after the add (the seed's Parallel(+))


@dataclass(frozen=True)
class Concat:
    layers: tuple  # [x, layers(x)] side by side on the channel (last) axis: U-Net's skip around its inner levels


@dataclass(frozen=True)
class Embed:
    vocab: int  # integer tokens (length,) -> (length, dim)
    dim: int


@dataclass(frozen=True)
class PosEmbed:
    length: int  # a learned (length, dim) table added to the tokens
    dim: int


@dataclass(frozen=True)
class ToTokens:
    pass  # (h, w, c) -> (h·w, c), row-major: after a Conv of kernel = stride = p, ViT's patch embedding


@dataclass(frozen=True)
class ClassToken:
    dim: int  # (n, dim) -> (n + 1, dim): a learned token put first (ViT's [class])


@dataclass(frozen=True)
class Token:
    index: int  # (n, dim) -> (dim,): one position, e.g. 0 (the class token) or -1 (an LSTM's last step)


@dataclass(frozen=True)
class Attention:
    """Multi-head self-attention on (length, dim): one fused qkv projection, the frameworks' fused scaled dot
    product (jax.nn.dot_product_attention, torch's scaled_dot_product_attention), an output projection."""

    dim: int
    heads: int
    causal: bool = False


@dataclass(frozen=True)
class LSTM:
    """(length, din) -> (length, hidden), gates i, f, g, o, a zero initial state."""

    din: int
    hidden: int


@dataclass(frozen=True)
class MatmulChain:
    """Seed 004: depth × o = (o @ w1 − b1) @ w2 − b2, with constant weights ones/n."""

    n: int
    depth: int


Layer = (Dense | Conv | BatchNorm | LayerNorm | RMSNorm | GroupNorm | Act | MaxPool | Upsample | Flatten
         | GlobalMeanPool | Mean | Residual | Concat | Embed | PosEmbed | ToTokens | ClassToken | Token | Attention
         | LSTM | MatmulChain)


def pair(v: int | tuple[int, int]) -> tuple[int, int]:
    return (v, v) if isinstance(v, int) else tuple(v)


def _param_shapes(layers: tuple, prefix: str = "") -> dict[str, tuple[tuple[int, ...], Any]]:
    """key -> (shape, fill): a float is a uniform ±bound (torch's default fan-in init), ("normal", sd) a normal,
    else "ones"/"zeros"/"1/n"."""
    out: dict[str, tuple[tuple[int, ...], Any]] = {}
    for i, layer in enumerate(layers):
        p = f"{prefix}{i}."
        match layer:
            case Dense(din, dout):
                out |= {p + "kernel": ((din, dout), din**-0.5), p + "bias": ((dout,), din**-0.5)}
            case Conv(cin, cout, k, _, _, bias, groups):
                (kh, kw), fan_in = pair(k), cin // groups * math.prod(pair(k))
                out[p + "kernel"] = ((kh, kw, cin // groups, cout), fan_in**-0.5)
                if bias:
                    out[p + "bias"] = ((cout,), fan_in**-0.5)
            case BatchNorm(c):
                out |= {p + "scale": ((c,), "ones"), p + "bias": ((c,), "zeros"),
                        p + "mean": ((c,), "zeros"), p + "var": ((c,), "ones")}
            case LayerNorm(c) | GroupNorm(_, c):
                out |= {p + "scale": ((c,), "ones"), p + "bias": ((c,), "zeros")}
            case RMSNorm(c):
                out[p + "scale"] = ((c,), "ones")
            case Embed(vocab, dim):
                out[p + "embedding"] = ((vocab, dim), ("normal", 1.0))  # torch's nn.Embedding init
            case PosEmbed(length, dim):
                out[p + "embedding"] = ((length, dim), ("normal", 0.02))
            case ClassToken(dim):
                out[p + "token"] = ((dim,), ("normal", 0.02))
            case Attention(dim, _, _):
                out |= {p + "qkv.kernel": ((dim, 3 * dim), dim**-0.5), p + "qkv.bias": ((3 * dim,), dim**-0.5),
                        p + "out.kernel": ((dim, dim), dim**-0.5), p + "out.bias": ((dim,), dim**-0.5)}
            case LSTM(din, hidden):  # torch's init: every weight uniform ±1/sqrt(hidden)
                for gate in LSTM_GATES:
                    out[f"{p}cell.{lstm_name('i', gate)}.kernel"] = ((din, hidden), hidden**-0.5)
                for gate in LSTM_GATES:
                    out[f"{p}cell.{lstm_name('h', gate)}.kernel"] = ((hidden, hidden), hidden**-0.5)
                    out[f"{p}cell.{lstm_name('h', gate)}.bias"] = ((hidden,), hidden**-0.5)
            case MatmulChain(n, _):
                out |= {p + w: (shape, "1/n") for w, shape in
                        (("w1", (n, n)), ("b1", (1, n)), ("w2", (n, n)), ("b2", (1, n)))}
            case Residual(inner) | Concat(inner):
                out |= _param_shapes(inner, p)
    return out


def _fill(shape: tuple[int, ...], fill, rng: np.random.Generator) -> np.ndarray:
    if isinstance(fill, float):
        return rng.uniform(-fill, fill, shape).astype(np.float32)
    if isinstance(fill, tuple):
        return (rng.standard_normal(shape) * fill[1]).astype(np.float32)
    value = {"ones": 1.0, "zeros": 0.0, "1/n": 1 / shape[-1]}[fill]
    return np.full(shape, value, np.float32)


def is_stat(key: str) -> bool:
    return key.rsplit(".", 1)[-1] in STATS


# ---- what a model is fed and judged on, made by nnbench: the same seeded numpy arrays for both frameworks

@dataclass(frozen=True)
class Image:
    """Float images ~ N(0,1), channels-last (h, w, c) here and in jax; torch gets them NCHW (framework.memory_format)."""

    h: int
    w: int
    c: int

    @property
    def shape(self) -> tuple[int, ...]:
        return (self.h, self.w, self.c)


@dataclass(frozen=True)
class Array:
    """Floats of any per-sample shape in the run's precision, the same layout for every framework; ~ N(0,1), or
    ones (seed 004's input)."""

    shape: tuple[int, ...]
    fill: str = "normal"  # normal or ones


@dataclass(frozen=True)
class Tokens:
    """Integer ids uniform in [0, vocab), (length,) per sample; never cast to the run's precision."""

    length: int
    vocab: int

    @property
    def shape(self) -> tuple[int, ...]:
        return (self.length,)


@dataclass(frozen=True)
class Labels:
    """A cross-entropy target: integer classes in [0, classes), one per sample (shape ()) or per position."""

    classes: int
    shape: tuple[int, ...] = ()


@dataclass(frozen=True)
class NextToken:
    """A language model's target: the input tokens shifted by one (y[t] = x[t+1]); one class per vocabulary entry."""


Input = Image | Array | Tokens
Target = Image | Array | Labels | NextToken
# A loss and the targets it takes: sse = sum((ŷ−y)²) (seed 000); mean = mean(ŷ), no target (seed 004);
# cross_entropy = the mean over samples (and positions) of −log softmax(ŷ)[y], on integer labels.
LOSSES: dict[str, tuple[type, ...]] = {"sse": (Image, Array), "mean": (), "cross_entropy": (Labels, NextToken)}


def _sample(what, batch: int, rng: np.random.Generator) -> np.ndarray:
    match what:
        case Image() | Array(_, "normal"):
            return rng.standard_normal((batch, *what.shape), np.float32)
        case Array(shape, _):
            return np.ones((batch, *shape), np.float32)
        case Tokens(length, vocab):
            return rng.integers(0, vocab, (batch, length), np.int32)
        case Labels(classes, shape):
            return rng.integers(0, classes, (batch, *shape), np.int32)
    raise TypeError(f"nnbench can't make {what!r}")


@dataclass(frozen=True, kw_only=True)
class Model:
    """What every model declares, the DSL's and a user's alike: its input, its target and loss, its batch sizes."""

    name: str = ""
    input: Input | None = None
    target: Target | None = None
    loss: str | None = None
    batch_sizes: dict[str, tuple[int, ...]] | None = field(default=None, hash=False)  # the lists a sweep runs, per op
    trainable: bool = True  # False: constant weights, "grad" is w.r.t. the input and "training" is unsupported

    @property
    def input_shape(self) -> tuple[int, ...]:
        return self.input.shape

    @property
    def output_shape(self) -> tuple[int, ...]:
        """Per sample, what the loss expects of the output (cross-entropy: one logit per class at each position)."""
        match self.target:
            case Labels(classes, shape):
                return (*shape, classes)
            case NextToken():
                return (self.input.length, self.input.vocab)
            case None:
                return ()
        return self.target.shape

    def make_batch(self, batch: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
        """(x, y), identical for every framework given the seed; y is empty when the loss takes no target."""
        rng = np.random.default_rng([seed, batch])  # not the weights' stream
        if isinstance(self.target, NextToken):
            seq = rng.integers(0, self.input.vocab, (batch, self.input.length + 1), np.int32)
            return np.ascontiguousarray(seq[:, :-1]), np.ascontiguousarray(seq[:, 1:])
        x = _sample(self.input, batch, rng)
        return x, _sample(self.target, batch, rng) if self.target else np.zeros((batch, 0), np.float32)


@dataclass(frozen=True, kw_only=True)
class ModelSpec(Model):
    """One model of the layer DSL, declared once as data; each backend builds it with its own layers."""

    layers: tuple

    def init(self, seed: int) -> dict[str, np.ndarray]:
        """Canonical float32 weights, identical for every framework given the seed."""
        rng = np.random.default_rng(seed)
        return {k: _fill(shape, fill, rng) for k, (shape, fill) in _param_shapes(self.layers).items()}

    def param_count(self) -> int:
        """Weights without BatchNorm running stats (matmul_chain: its constant weights)."""
        return sum(math.prod(shape) for k, (shape, _) in _param_shapes(self.layers).items() if not is_stat(k))


# ---- a user's own network

@dataclass(frozen=True)
class Source:
    """Where a network's code comes from, so a change to it is a change of the point: a file and its content's
    hash, or an installed package and its version."""

    kind: str  # "file" or "package"
    where: str  # the file's absolute path, or "<distribution> (<entry point value>)"
    version: str  # the file's sha256 (first 16 hex digits), or the package's version


@dataclass(frozen=True, kw_only=True)
class Network(Model):
    """A user's own network, as `build(**keys)` returns it: a torch builder and/or a Flax NNX builder (each a
    zero-argument callable returning the module, e.g. a class or a functools.partial), and what `Model` declares.

    The torch module takes images as NCHW, the Flax one as NHWC (each framework's own layout); tokens and arrays
    come as declared. `weights` maps each Flax parameter path ("layers.0.kernel", as nnx.state flattens it) to
    the torch parameter or buffer it is read from: its name ("0.weight"), (name, axes) with an np.transpose, or a
    `From` (rows of a packed parameter, reshaped, or a function of it); `attention`, `encoder_layer` and `lstm`
    give a whole layer's entries. It buys a parity check. `flops(op, batch)`, where given, is the count
    per call that every framework's MFU is computed from.
    """

    torch: Callable[[], Any] | None = None
    flax: Callable[[], Any] | None = None
    weights: Mapping[str, Entry] | None = field(default=None, hash=False)
    flops: Callable[[str, int], int] | None = None
    source: Source | None = None  # set by `load`
    params: dict[str, int] = field(default_factory=dict, hash=False)  # trainable parameters per side, set by `load`

    def builder(self, framework: str) -> Callable[[], Any] | None:
        return {"torch": self.torch, "jax": self.flax}[framework]

    def param_count(self) -> int:
        """The torch side's count where there is one, else the Flax side's (`params` has both)."""
        return next(iter(self.params.values()), 0)

    def weight_map(self) -> dict[str, From]:
        """flax path -> how it is read from torch, every form of entry as a `From`."""
        return {k: entry(k, v) for k, v in (self.weights or {}).items()}


# ---- finding and loading a model by name

def available() -> list[str]:
    """The models of the layer DSL, one file each in this package."""
    return sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_"))


def installed() -> dict[str, importlib.metadata.EntryPoint]:
    """Networks of installed packages, by entry-point name (a built-in name wins over a package's)."""
    return {ep.name: ep for ep in importlib.metadata.entry_points(group=ENTRY_POINTS)
            if ep.name not in available() and ep.name != FILE}


def names() -> list[str]:
    """Every name `model=` takes."""
    return available() + sorted(installed()) + [FILE]


def _short(e: BaseException) -> str:
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    return f"{type(e).__name__}: {lines[0][:200] if lines else ''}".rstrip(": ")


def _watched_import(what: str, do: Callable[[], Any]) -> Any:
    """Run an import of the user's code, refusing one that starts a thread or jax's backend: the fork server forks
    measuring workers only while neither exists (experiments/measure/server.py)."""
    threads = {t.ident for t in threading.enumerate()}
    backends = _xla_backends()
    try:
        out = do()
    except Exception as e:
        raise ValueError(f"{what} failed to import: {_short(e)}") from None
    if started := [t.name for t in threading.enumerate() if t.ident not in threads]:
        raise ValueError(f"{what} started a thread at import ({', '.join(started)}): start it inside build() or a "
                         "builder, so that nnbench can fork fresh measuring workers after importing it")
    if not backends and _xla_backends():
        raise ValueError(f"{what} started jax's XLA backend at import (an array made at module level?): make "
                         "arrays inside build() or a builder, so that nnbench can fork fresh measuring workers")
    return out


def _xla_backends() -> bool:
    if "jax" not in sys.modules:
        return False
    from jax._src import xla_bridge  # jax is already imported: only to ask whether its backend has started

    return bool(xla_bridge._backends)


def _file_module(path: str):
    """The user's file as a module, imported once per process (the fork server's import serves its workers)."""
    p = Path(path)
    digest = hashlib.sha256(p.read_bytes()).hexdigest()[:16]
    name = f"nnbench_file_{p.stem}_{digest}"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, p)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            _watched_import(str(p), lambda: spec.loader.exec_module(module))
        except ValueError:
            del sys.modules[name]
            raise
    return sys.modules[name], Source("file", str(p), digest)


def _file_path(keys: dict) -> str:
    """model=file's path, absolute: relative to `cwd` (the directory the sweep started in, as the config records it)."""
    path, cwd = keys.pop("path", None), keys.pop("cwd", None)
    if not path:
        raise ValueError("model=file needs model.path: the Python file with your build(), e.g. model.path=./mynet.py")
    p = Path(cwd or ".", path).expanduser().resolve()
    if not p.is_file():
        raise ValueError(f"model.path={path}: no such file ({p}): give the path of the Python file with your "
                         "build(), relative to where you start the sweep")
    return str(p)


def _resolve(name: str, keys: dict) -> tuple[Callable, Source | None, str]:
    """(build, its source, how to name it in a message); `keys` loses model=file's own keys."""
    if name in available():
        return import_module(f"{__name__}.{name}").build, None, f"model {name!r}"
    if name == FILE:
        module, source = _file_module(_file_path(keys))
        where = Path(source.where).name
    elif ep := installed().get(name):
        dist = ep.dist.name if ep.dist else ep.module
        version = ep.dist.version if ep.dist else ""
        module = _watched_import(f"entry point {name!r} ({ep.value})", ep.load)
        source, where = Source("package", f"{dist} ({ep.value})", version), f"entry point {name!r} ({ep.value})"
    else:
        raise ValueError(f"unknown model {name!r}; available: {', '.join(names())}")
    build = getattr(module, "build", None) if inspect.ismodule(module) else module
    if not callable(build):
        raise ValueError(f"{where} has no build(): define build(**keys) that returns a models.Network "
                         "(docs/own-network.md)")
    return build, source, where


def preload(name: str, **keys) -> None:
    """Import a user's network's code without building anything (the fork server does, before it forks workers);
    a built-in model needs nothing. Raises ValueError as `load` does."""
    if name not in available():
        _resolve(name, dict(keys))


def _check_keys(build: Callable, keys: dict, where: str) -> None:
    params = inspect.signature(build).parameters
    if any(p.kind == p.VAR_KEYWORD for p in params.values()):
        return
    if unknown := sorted(set(keys) - set(params)):
        raise ValueError(f"{where} has no key {', '.join(unknown)}; its keys: {', '.join(params) or 'none'}")
    for k, v in keys.items():  # a size the model declares as an int (matmul_chain's n, m) is one, > 0
        if type(params[k].default) is int and not (type(v) is int and v > 0):
            raise ValueError(f"model.{k} must be a positive integer (got {v!r}): "
                             f"use e.g. model.{k}={params[k].default}")


def _check_declaration(m: Any, where: str) -> None:
    """The fields every declaration needs, each missing one named with its fix."""
    if not isinstance(m, Model):
        raise ValueError(f"{where}: build() returned {type(m).__name__}, not a models.Network: return "
                         "Network(torch=..., flax=..., input=..., loss=..., batch_sizes=...)")
    if not isinstance(m.input, (Image, Array, Tokens)):
        raise ValueError(f"{where}: the declaration has no input: add input=Image(32, 32, 3), "
                         "Tokens(length, vocab) or Array((features,))")
    if m.loss not in LOSSES:
        raise ValueError(f"{where}: the declaration has no loss ({m.loss!r}): add loss='sse', 'mean' or "
                         "'cross_entropy' (with target=...)")
    takes = LOSSES[m.loss]
    if (m.target is None) != (not takes) or (m.target is not None and not isinstance(m.target, takes)):
        need = " or ".join(f"{t.__name__}(...)" for t in takes) if takes else "no target (target=None)"
        raise ValueError(f"{where}: loss={m.loss!r} takes {need}, not target={m.target!r}")
    if isinstance(m.target, NextToken) and not isinstance(m.input, Tokens):
        raise ValueError(f"{where}: target=NextToken() needs input=Tokens(length, vocab)")
    sizes = m.batch_sizes
    if not isinstance(sizes, Mapping) or not sizes:
        raise ValueError(f"{where}: the declaration has no batch sizes: add e.g. "
                         "batch_sizes={'inference': (1, 8, 32), 'training': (8, 32)}")
    for op, bs in sizes.items():
        if op not in OPS:
            raise ValueError(f"{where}: batch_sizes names no op {op!r}: use {', '.join(OPS)}")
        if not all(type(b) is int and b > 0 for b in bs):
            raise ValueError(f"{where}: batch_sizes[{op!r}] must be positive integers (got {bs!r})")
    if isinstance(m, Network) and m.torch is None and m.flax is None:
        raise ValueError(f"{where}: the Network has neither torch= nor flax=: give at least one builder")


def declared(name: str, **keys) -> Model:
    """The model as its `build(**keys)` declares it, checked without building any module (what a measuring worker
    needs: it builds only its own framework's side)."""
    build, source, where = _resolve(name, keys)
    _check_keys(build, keys, where)
    try:
        m = build(**keys)
    except Exception as e:  # the user's code: its own message, one line
        if source is None:
            raise
        raise ValueError(f"{where}: build() raised {_short(e)}") from None
    _check_declaration(m, where)
    if isinstance(m, Network):
        m = dataclasses.replace(m, name=name if name != FILE else Path(source.where).stem, source=source)
    return m


_LOADED: dict[str, Model] = {}


def load(name: str, **keys) -> Model:
    """`declared`, and for a Network each side built once without computing (torch on the meta device, Flax through
    nnx.eval_shape): a builder that raises, or a weight map naming a parameter that doesn't exist, is one line here,
    before anything is measured. Cached per name and keys."""
    memo = repr((name, sorted(keys.items())))
    if memo not in _LOADED:
        m = declared(name, **keys)
        if isinstance(m, Network):
            from models import _check  # imports torch and/or flax: only where a user's network is loaded

            m = _check.checked(m)
        _LOADED[memo] = m
    return _LOADED[memo]

"""A weight map's entries: how one Flax parameter is read from one torch parameter (its name, a transpose, the rows
of a packed projection reshaped, or a function of it), the shape each reading gives, computed without values, the
fix a mismatch names, and the maps of the layers both frameworks have (attention, a transformer encoder layer, an
LSTM's gates)."""
from __future__ import annotations

import itertools
import math
import re
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

LSTM_GATES = ("i", "f", "g", "o")  # torch's order of the gates in weight_ih/weight_hh; flax's LSTMCell names them so


def lstm_name(side: str, gate: str) -> str:
    """flax LSTMCell's Linear for one gate: ii, if_, ig, io (input side), hi, hf, hg, ho (hidden side)."""
    return f"{side}{gate}" + ("_" if side + gate == "if" else "")  # `if` is a Python keyword


def kernel_axes(flax_name: str, ndim: int) -> tuple[int, ...] | None:
    """The transpose a parameter needs when its entry gives no axes: a `kernel` goes from torch's (out, in, *window)
    to Flax's (*window, in, out), Linear and Conv alike; anything else is read as is (None)."""
    if flax_name.rsplit(".", 1)[-1] == "kernel" and ndim >= 2:
        return (*range(2, ndim), 1, 0)
    return None


def _ints(what: str, v: Any) -> tuple[int, ...]:
    if not isinstance(v, (tuple, list)) or not all(type(i) is int for i in v):
        raise ValueError(f"models.From's {what} must be a tuple of integers (got {v!r})")
    return tuple(v)


@dataclass(frozen=True, repr=False)
class From:
    """A Flax parameter read from the torch parameter `name`: its `rows` (a slice of the first axis, where torch
    packs a fused projection's parts), transposed by `axes` (None: `kernel_axes`' rule), then reshaped to `reshape`;
    or `fn` instead of the three, a function of the torch array that returns the Flax one. Each step only moves
    values, so the same entry reads torch's gradient into the Flax parameter's layout for the parity check: a `fn`
    must do no more (slice, reorder, reshape; never add or scale)."""

    name: str
    rows: slice | None = field(default=None, hash=False)
    axes: tuple[int, ...] | None = None
    reshape: tuple[int, ...] | None = None
    fn: Callable[[np.ndarray], np.ndarray] | None = field(default=None, hash=False)

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"models.From needs the torch parameter's name first (got {self.name!r})")
        r = self.rows
        if r is not None and not (isinstance(r, slice) and all(v is None or type(v) is int for v in
                                                                 (r.start, r.stop, r.step)) and (r.step or 1) > 0):
            raise ValueError(f"models.From's rows must be a slice of integers, e.g. rows=slice(0, 32) (got {r!r})")
        for what in ("axes", "reshape"):
            if getattr(self, what) is not None:
                object.__setattr__(self, what, _ints(what, getattr(self, what)))
        if self.fn is not None and (not callable(self.fn) or (r, self.axes, self.reshape) != (None, None, None)):
            raise ValueError(f"models.From({self.name!r}, fn=...) takes a function and nothing else: give fn, or "
                             "rows/axes/reshape")

    def __repr__(self) -> str:
        """As the entry is written, the fix a door's message names."""
        parts = [repr(self.name)]
        if self.rows is not None:
            parts.append(f"rows=slice({self.rows.start}, {self.rows.stop}" +
                         (f", {self.rows.step})" if self.rows.step not in (None, 1) else ")"))
        parts += [f"{k}={getattr(self, k)}" for k in ("axes", "reshape") if getattr(self, k) is not None]
        parts += ["fn=..."] if self.fn is not None else []
        return f"models.From({', '.join(parts)})"

    def span(self) -> str:
        """The rows read, as numpy writes them ("0:32"); "" for all."""
        if self.rows is None:
            return ""
        step = f":{self.rows.step}" if self.rows.step not in (None, 1) else ""
        return f"{self.rows.start or 0}:{'' if self.rows.stop is None else self.rows.stop}{step}"

    def label(self) -> str:
        """The torch side of a parity check's `where`: the name, and the rows read."""
        return f"{self.name}[{self.span()}]" if self.rows is not None else self.name

    def read(self, flax_name: str, a: np.ndarray) -> np.ndarray:
        """The torch array (a weight or its gradient) as the Flax parameter `flax_name`."""
        if self.fn is not None:
            return np.ascontiguousarray(self.fn(a))
        a = a[self.rows] if self.rows is not None else a
        axes = self.axes if self.axes is not None else kernel_axes(flax_name, a.ndim)
        a = np.transpose(a, axes) if axes is not None else a
        return np.ascontiguousarray(a.reshape(self.reshape) if self.reshape is not None else a)

    def shape(self, flax_name: str, shape: tuple[int, ...]) -> tuple[int, ...]:
        """What `read` makes of a torch parameter of `shape`, without its values (a `fn` is called on a stand-in
        that holds none); ValueError says which step can't."""
        if self.fn is not None:
            try:
                return tuple(np.shape(self.fn(np.broadcast_to(np.zeros((), np.float32), shape))))
            except Exception as e:
                raise ValueError(f"its fn raised {type(e).__name__}: {str(e).strip()[:120]}") from None
        if self.rows is not None:
            if not shape or (self.rows.stop or 0) > shape[0] or (self.rows.start or 0) >= shape[0]:
                raise ValueError(f"rows {self.span()} run past its {shape[0] if shape else 0} rows")
            shape = (len(range(*self.rows.indices(shape[0]))), *shape[1:])
        axes = self.axes if self.axes is not None else kernel_axes(flax_name, len(shape))
        if axes is not None:
            if sorted(axes) != list(range(len(shape))):
                raise ValueError(f"axes={axes} don't reorder its {len(shape)} axes {shape}")
            shape = tuple(shape[i] for i in axes)
        if self.reshape is not None and math.prod(self.reshape) != math.prod(shape):
            what = f"rows {self.span()}" if self.rows is not None else "it"
            raise ValueError(f"{what} give {shape} before the reshape, {math.prod(shape)} values, not the "
                             f"{math.prod(self.reshape)} of {self.reshape}")
        return self.reshape or shape


Entry = str | tuple[str, tuple[int, ...]] | From  # a weight map's value: a name, (name, axes), or a From


def entry(flax_name: str, value: Entry) -> From:
    """Any form of a map's value as a From: "name" is From(name), (name, axes) is From(name, axes=axes)."""
    if isinstance(value, From):
        return value
    if isinstance(value, str):
        return From(value)
    if isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], str):
        return From(value[0], axes=value[1])
    raise ValueError(f"the weight map's {flax_name} is {value!r}: give a torch name, (name, axes) or "
                     "models.From(name, rows=..., axes=..., reshape=...)")


def mismatch(flax_name: str, flax_shape: tuple[int, ...], e: From, torch_shape: tuple[int, ...]) -> str | None:
    """Why the entry can't fill the Flax parameter, and the fix, in one line; None where it fits."""
    try:
        got = e.shape(flax_name, torch_shape)
    except ValueError as why:
        problem = f"{e!r}: {why}"
    else:
        if got == tuple(flax_shape):
            return None
        source = e.name if (e.rows, e.reshape, e.fn) == (None, None, None) else repr(e)
        problem = f"{source} {torch_shape} reads as {got}"
    return f"the weight map's {flax_name} {flax_shape} <- {problem}: {fix(flax_name, flax_shape, e.name, torch_shape)}"


def fix(flax_name: str, flax_shape: tuple[int, ...], name: str, shape: tuple[int, ...]) -> str:
    """The first reading that gives the Flax shape (a transpose, a reshape, the rows of a packed parameter, with its
    layer's whole map where the name says which layer packs it), or that none can: only a fix that fits is named."""
    flax_shape, shape = tuple(flax_shape), tuple(shape)
    if From(name).shape(flax_name, shape) == flax_shape:
        return f"give its name alone, e.g. {flax_name!r}: {name!r}"
    if sorted(shape) == sorted(flax_shape) and len(shape) > 1:
        axes = next(p for p in itertools.permutations(range(len(shape))) if tuple(shape[i] for i in p) == flax_shape)
        return f"give the axes, e.g. {flax_name!r}: ({name!r}, {axes})"
    if math.prod(shape) == math.prod(flax_shape):
        return f"reshape it, e.g. {flax_name!r}: {From(name, reshape=flax_shape)!r}"
    n, want = math.prod(shape), max(math.prod(flax_shape), 1)
    parts = n // want
    if parts < 2 or n % want or not shape or shape[0] % parts:
        return f"no reading of {name}'s {n} values gives {want}: map {flax_name} from the torch parameter that holds it"
    if layer := packed_layer(flax_name, flax_shape, name, shape, parts):
        return layer
    rows = From(name, rows=slice(0, shape[0] // parts))
    if rows.shape(flax_name, shape) != flax_shape:
        rows = From(name, rows=rows.rows, reshape=flax_shape)
    return f"{name} packs {parts} parts along its rows: read one, e.g. {flax_name!r}: {rows!r}"


def packed_layer(flax_name: str, flax_shape: tuple[int, ...], name: str, shape: tuple[int, ...],
                 parts: int) -> str | None:
    """The map of the layer that packs `name` in `parts`, where its name says which (torch's attention, its LSTM),
    as a fix."""
    where, _, param = name.rpartition(".")
    path = flax_name.split(".")
    cell, part = ".".join(path[:-2]), path[-2] if len(path) > 1 else ""  # "att.query.kernel": att, query
    if param in ("in_proj_weight", "in_proj_bias") and part in ("query", "key", "value") and parts == 3 and \
            len(flax_shape) >= 2 and shape[0] // 3 % flax_shape[-2] == 0:
        dim, heads = shape[0] // 3, flax_shape[-2]
        return (f"{name} is torch's packed q, k and v: map the layer with **models.attention({cell!r}, {where!r}, "
                f"dim={dim}, heads={heads})")
    gates = {lstm_name(side, g) for side in "ih" for g in LSTM_GATES}
    if (m := re.fullmatch(r"(weight_ih|weight_hh|bias_hh)_l(\d+)", param)) and part in gates and parts == 4:
        return (f"{name} is torch's LSTM gates i, f, g, o: map the cell with **models.lstm_cell({cell!r}, {where!r}, "
                f"hidden={shape[0] // 4}, layer={m.group(2)})")
    return None


def unmapped(names: list[str]) -> str:
    """The fix for torch parameters the map leaves out: map each, or where Flax's layer has no counterpart (an LSTM's
    input-side bias), hold it at zero and frozen."""
    lstm_bias = [n for n in names if re.search(r"(^|\.)bias_ih_l\d+$", n)]
    if not lstm_bias:
        return "map each one"
    return (f"map each one; {lstm_bias[0]} has no counterpart in Flax's LSTM cell (one bias per gate): hold it at "
            "zero and frozen (requires_grad_(False))")


def unread_rows(entries: list[From], shape: tuple[int, ...]) -> str | None:
    """The rows of a torch parameter of `shape` no entry reads, where every entry reads some of its rows (None: all
    are read)."""
    if any(e.rows is None for e in entries):
        return None
    rows = shape[0]
    left = set(range(rows)).difference(*(range(*e.rows.indices(rows)) for e in entries))
    if not left:
        return None
    return f"{min(left)}:{max(left) + 1}" if len(left) == max(left) + 1 - min(left) else f"{len(left)} of {rows}"


def _at(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def attention(flax: str, torch: str, dim: int, heads: int, bias: bool = True) -> dict[str, From]:
    """The map of an `nnx.MultiHeadAttention` at path `flax` from an `nn.MultiheadAttention` named `torch`, of `dim`
    features and `heads` heads: torch packs q, k and v as the rows of in_proj_weight (3·dim, dim) and in_proj_bias;
    Flax keeps each as a kernel (dim, heads, dim/heads) and a bias (heads, dim/heads), the output's kernel as
    (heads, dim/heads, dim). Torch's kdim/vdim (separate q/k/v_proj_weight) are not this layout."""
    if dim % heads:
        raise ValueError(f"models.attention: dim={dim} is not a multiple of heads={heads}")
    size, out = dim // heads, {}
    for i, part in enumerate(("query", "key", "value")):
        rows = slice(i * dim, (i + 1) * dim)
        out[_at(flax, f"{part}.kernel")] = From(_at(torch, "in_proj_weight"), rows=rows, reshape=(dim, heads, size))
        if bias:
            out[_at(flax, f"{part}.bias")] = From(_at(torch, "in_proj_bias"), rows=rows, reshape=(heads, size))
    out[_at(flax, "out.kernel")] = From(_at(torch, "out_proj.weight"), reshape=(heads, size, dim))
    if bias:
        out[_at(flax, "out.bias")] = From(_at(torch, "out_proj.bias"))
    return out


def encoder_layer(flax: str, torch: str, dim: int, heads: int) -> dict[str, From]:
    """The map of a Flax block at path `flax` from an `nn.TransformerEncoderLayer` named `torch`: the block names
    its parts as torch does (self_attn an nnx.MultiHeadAttention, linear1, linear2 nnx.Linear, norm1, norm2
    nnx.LayerNorm)."""
    out = attention(_at(flax, "self_attn"), _at(torch, "self_attn"), dim, heads)
    for part, params in (("linear", (("kernel", "weight"), ("bias", "bias"))),
                         ("norm", (("scale", "weight"), ("bias", "bias")))):
        for i, (f, t) in itertools.product((1, 2), params):
            out[_at(flax, f"{part}{i}.{f}")] = From(_at(torch, f"{part}{i}.{t}"))
    return out


def lstm_cell(flax: str, torch: str, hidden: int, layer: int = 0) -> dict[str, From]:
    """The map of an `nnx.LSTMCell` at path `flax` from layer `layer` of an `nn.LSTM` named `torch`: torch packs the
    gates i, f, g, o as the rows of weight_ih_l<layer>, weight_hh_l<layer> and its biases; Flax keeps a Linear per
    gate and side, one bias per gate (on the hidden side). Torch's bias_ih_l<layer> has no counterpart: hold it at
    zero and frozen (`requires_grad_(False)`)."""
    out = {}
    for i, gate in enumerate(LSTM_GATES):
        rows = slice(i * hidden, (i + 1) * hidden)
        out[_at(flax, f"{lstm_name('i', gate)}.kernel")] = From(_at(torch, f"weight_ih_l{layer}"), rows=rows)
        out[_at(flax, f"{lstm_name('h', gate)}.kernel")] = From(_at(torch, f"weight_hh_l{layer}"), rows=rows)
        out[_at(flax, f"{lstm_name('h', gate)}.bias")] = From(_at(torch, f"bias_hh_l{layer}"), rows=rows)
    return out

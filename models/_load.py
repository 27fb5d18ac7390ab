"""Loading a model: its `build(**keys)` called, the declaration it returns checked field by field (each missing one
named with its fix), and for a user's network each side built once without computing (`_check`), cached per name
and keys."""
from __future__ import annotations

import dataclasses
import inspect
from pathlib import Path
from typing import Any, Callable, Mapping

from models._data import LOSSES, Array, Image, NextToken, Tokens
from models._declarations import OPS, Model, Network
from models._registry import FILE, _resolve, _short


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


def _memo(name: str, keys: dict) -> str:
    return repr((name, sorted(keys.items())))


def known(name: str, params: dict[str, int], **keys) -> Model:
    """`declared`, for a network another process has loaded (`load`) a moment ago: its trainable parameter count per
    side from that check, its sides not built again; cached as `load` caches."""
    memo = _memo(name, keys)
    if memo not in _LOADED:
        m = declared(name, **keys)
        _LOADED[memo] = dataclasses.replace(m, params=dict(params)) if isinstance(m, Network) else m
    return _LOADED[memo]


def load(name: str, **keys) -> Model:
    """`declared`, and for a Network each side built once without computing (torch on the meta device, Flax through
    nnx.eval_shape): a builder that raises, or a weight map naming a parameter that doesn't exist, is one line here,
    before anything is measured. Cached per name and keys."""
    memo = _memo(name, keys)
    if memo not in _LOADED:
        m = declared(name, **keys)
        if isinstance(m, Network):
            from models import _check  # imports torch and/or flax: only where a user's network is loaded

            m = _check.checked(m)
        _LOADED[memo] = m
    return _LOADED[memo]

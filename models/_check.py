"""The door's check of a user's network: each side built once without computing (torch on the meta device, Flax
through nnx.eval_shape), its parameters named and counted, and the weight map checked against them. Imports the
frameworks the network uses, so only a process that loads a user's network imports this module."""
from __future__ import annotations

import dataclasses
import math

from models._declarations import Network
from models._registry import _short
from models._weights import mismatch, unmapped, unread_rows


def torch_side(net: Network) -> tuple[dict[str, tuple[int, ...]], set[str]]:
    """{parameter or buffer name: shape} of the torch module, and the names of its trainable parameters."""
    import torch  # the user's network has a torch side

    def build(device: str):
        with torch.device(device):
            return net.torch()

    try:
        m = build("meta")  # shapes only, nothing allocated
    except Exception:
        try:
            m = build("cpu")  # a builder that reads its own tensors' values can't build on the meta device
        except Exception as e:
            raise ValueError(f"{net.name}: the torch builder raised {_short(e)}") from None
    if not isinstance(m, torch.nn.Module):
        raise ValueError(f"{net.name}: the torch builder returned {type(m).__name__}, not a torch.nn.Module")
    shapes = {k: tuple(v.shape) for k, v in [*m.named_parameters(), *m.named_buffers()]}
    return shapes, {k for k, p in m.named_parameters() if p.requires_grad}


def flax_side(net: Network) -> tuple[dict[str, tuple[int, ...]], set[str]]:
    """{variable path: shape} of the Flax module, and the paths of its nnx.Params."""
    from flax import nnx  # the user's network has a Flax side

    try:
        m = nnx.eval_shape(net.flax)
    except Exception as e:
        raise ValueError(f"{net.name}: the flax builder raised {_short(e)}") from None
    if not isinstance(m, nnx.Module):
        raise ValueError(f"{net.name}: the flax builder returned {type(m).__name__}, not a flax.nnx.Module")
    shapes = {k: tuple(v.shape) for k, v in flat(nnx.state(m)).items() if hasattr(v, "shape")}
    return shapes, set(flat(nnx.state(m, nnx.Param)))


def flat(state) -> dict:
    """An nnx.State as {"a.0.kernel": its value}."""
    from flax import nnx  # the callers have imported it

    return {".".join(str(k) for k in path): v.get_value() for path, v in nnx.to_flat_state(state)}


def check_weights(net: Network, torch_shapes: dict, torch_trainable: set[str], flax_shapes: dict,
                  flax_params: set[str]) -> None:
    """Every name in the map exists on its side, each reading gives its parameter's shape, every trainable parameter
    is mapped and every row of a packed torch parameter is read."""
    try:
        mapping = net.weight_map()
    except ValueError as e:
        raise ValueError(f"{net.name}: {e}") from None
    if bad := sorted(set(mapping) - set(flax_shapes)):
        raise ValueError(f"{net.name}: the weight map names {', '.join(bad)}, not a parameter of the flax module "
                         f"(its parameters: {', '.join(sorted(flax_shapes)[:12])})")
    read = {e.name for e in mapping.values()}
    if bad := sorted(read - set(torch_shapes)):
        raise ValueError(f"{net.name}: the weight map names {', '.join(bad)}, not a parameter of the torch module "
                         f"(its parameters: {', '.join(sorted(torch_shapes)[:12])})")
    for f, e in mapping.items():
        if problem := mismatch(f, flax_shapes[f], e, torch_shapes[e.name]):
            raise ValueError(f"{net.name}: {problem}")
    if left := sorted(flax_params - set(mapping)):
        raise ValueError(f"{net.name}: the weight map leaves out flax parameters {', '.join(left[:8])}: map each one")
    if left := sorted(torch_trainable - read):
        raise ValueError(f"{net.name}: the weight map leaves out torch parameters {', '.join(left[:8])}: "
                         f"{unmapped(left)}")
    for t in sorted(read):
        if left := unread_rows([e for e in mapping.values() if e.name == t], torch_shapes[t]):
            raise ValueError(f"{net.name}: no entry of the weight map reads rows {left} of {t}: map them to the "
                             "Flax parameter they hold")


def checked(net: Network) -> Network:
    """The network with its trainable parameter count per builder (its field: torch, flax); raises ValueError (one
    line, with the fix) on a builder that fails or a weight map that names what isn't there."""
    params: dict[str, int] = {}
    if net.torch is not None:
        torch_shapes, trainable = torch_side(net)
        params.update(torch=sum(math.prod(torch_shapes[k]) for k in trainable))
    if net.flax is not None:
        flax_shapes, flax_params = flax_side(net)
        params.update(flax=sum(math.prod(flax_shapes[k]) for k in flax_params))
    if net.weights is not None:
        if len(params) < 2:
            raise ValueError(f"{net.name}: a weight map needs both torch= and flax= (it maps one to the other)")
        check_weights(net, torch_shapes, trainable, flax_shapes, flax_params)
    return dataclasses.replace(net, params=params)

"""Finding a model by name and importing its code: the built-ins (one public module of this package each), the
networks installed packages declare (entry-point group `nnbench.models`) and `model=file`'s file, each user's
import watched for what would stop the fork server forking."""
from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import inspect
import pkgutil
import sys
import threading
from importlib import import_module
from pathlib import Path
from typing import Any, Callable

from models._declarations import Source

ENTRY_POINTS = "nnbench.models"  # the entry-point group an installed package declares its networks in
FILE = "file"  # model=file model.path=./mynet.py: a network from one file


def available() -> list[str]:
    """The models of the layer DSL, one public module each in this package (a module starting with `_` is a part)."""
    return sorted(m.name for m in pkgutil.iter_modules([str(Path(__file__).parent)]) if not m.name.startswith("_"))


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
        return import_module(f"{__package__}.{name}").build, None, f"model {name!r}"
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


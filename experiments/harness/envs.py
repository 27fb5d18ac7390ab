"""Measuring environments, one per version spec (`jax==0.10.1`), built once and cached by the installers of
harness/installers.py. Parent side: the installers run here, the workers run in the environments (`runtime.python`).

An environment is a venv whose `nnbench-base.pth` adds this interpreter's site-packages behind the venv's own (their
.pth files processed, so nnbench and everything else import as here), with only what differs installed in front:
the spec's pins (a spec pins what belongs to it: jax pins jaxlib at the same version) and whatever the installer
must move to satisfy them. Which packages move comes from one resolve of the pins plus every installed package that
depends on a pinned or moved one, each preferring its installed version: `uv pip compile` seeded with this
environment's versions, then `uv pip install --no-deps` of the difference (uv when installed), or pip's resolver,
which keeps what is installed where it can. torch is never moved unless pinned (a move could pull a CUDA build).

Then the new interpreter is asked what it imports: the versions that differ from here are the environment's record
(its `Manifest`, `nnbench-env.json`, which `measure.environment.spec_record` reads), a dependency that a moved package
no longer satisfies is one line naming the conflict, and a backend whose packages moved takes one LeNet training step
(`worker --smoke`).

The cache (`$NNBENCH_ENV_CACHE`, else `~/.cache/nnbench/envs`) holds one folder per spec and interpreter; a folder
built from another state of this environment is stale, and is built again.
"""
from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import itertools
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
import venv
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from experiments.common.config import ROOT
from experiments.harness import manager
from experiments.harness.installers import Index, reason, uv
from experiments.common.frameworks import every
from experiments.measure.environment import ENV_MANIFEST

# Pinned at the same version as the package they belong to (each backend's `companions`).
COMPANIONS = {n: c for t in every() for n, c in t.companions.items()}
HOLD = tuple(n for t in every() for n in t.hold)  # kept as installed unless pinned (each backend's `hold`)
IGNORED = ("pip", "setuptools", "wheel", "uv", "nnbench")  # the installers, and the suite (from its checkout)
# What an interpreter imports: per distribution name, the first on sys.path (its version and requirements).
PROBE = r'''
import importlib.metadata as md, json, re, sys
seen = {}
for d in md.distributions():
    n = re.sub(r"[-_.]+", "-", (d.metadata["Name"] or "")).lower()
    if n and n not in seen:
        seen[n] = [d.version, d.requires or []]
print(json.dumps(seen))
'''


class BuildError(Exception):
    """An environment that can't be built; the message is one line naming the spec and the reason."""


@dataclass(frozen=True)
class Spec:
    """One environment's pins as the user named them (`jax==0.10.1 optax==0.2.8`)."""

    pins: tuple[tuple[str, str], ...]

    def __str__(self) -> str:
        return " ".join(f"{n}=={v}" for n, v in self.pins)

    @property
    def requirements(self) -> list[str]:
        """The pins and their companions: jax==0.10.1 jaxlib==0.10.1."""
        return [f"{m}=={v}" for n, v in self.pins for m in (n, *COMPANIONS.get(n, ()))]

    @property
    def pinned(self) -> dict[str, str]:
        """The pins and their companions by their canonical names: {"jax": "0.10.1", "jaxlib": "0.10.1"}."""
        return {canonicalize_name(n): v for n, v in (r.split("==") for r in self.requirements)}

    @property
    def slug(self) -> str:
        return re.sub(r"[^A-Za-z0-9.]+", "-", "_".join(f"{n}-{v}" for n, v in self.pins))[:80]


def parse(args: list[str]) -> list[Spec]:
    """`jax==0.10.0,0.10.1 optax==0.2.7,0.2.8` as the cross product of one spec per version; ValueError naming the
    fix."""
    names, lists = [], []
    for arg in args:
        name, sep, versions = arg.partition("==")
        if not sep or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name) or not versions:
            raise ValueError(f"{arg!r} is not PACKAGE==V1,V2,...: list the versions, e.g. jax==0.10.0,0.10.1")
        name = canonicalize_name(name)
        if name in names:
            raise ValueError(f"{name} is given twice: list all its versions once, e.g. {name}==A,B")
        vs = [v.strip() for v in versions.split(",") if v.strip()]
        for v in vs:
            try:
                Version(v)
            except InvalidVersion:
                raise ValueError(f"{v!r} in {arg!r} is not a version: e.g. {name}==0.10.0,0.10.1") from None
        names.append(name)
        lists.append(list(dict.fromkeys(vs)))
    if not names:
        raise ValueError("no spec given: name the versions, e.g. nnbench versions jax==0.10.0,0.10.1 model=lenet")
    return [Spec(tuple(zip(names, combo))) for combo in itertools.product(*lists)]


def cache_root() -> Path:
    if os.environ.get("NNBENCH_ENV_CACHE"):
        return Path(os.environ["NNBENCH_ENV_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "nnbench" / "envs"


def clean_environ() -> dict[str, str]:
    """This process's environment variables without PYTHONPATH: the probes see what an interpreter itself imports."""
    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


def packages(python: str | Path = sys.executable) -> dict[str, tuple[str, list[str]]]:
    """{name: (version, requirements)} of what `python` imports."""
    r = subprocess.run([str(python), "-c", PROBE], capture_output=True, text=True, env=clean_environ(), cwd="/")
    if r.returncode:
        raise BuildError(f"cannot list the packages of {python}: {(r.stderr.strip().splitlines() or ['?'])[-1]}")
    return {n: (v, reqs) for n, (v, reqs) in json.loads(r.stdout).items()}


def requires(reqs: list[str]) -> list[Requirement]:
    """The requirements that apply here (markers evaluated, extras left out)."""
    out = []
    for text in reqs:
        with contextlib.suppress(InvalidRequirement):
            r = Requirement(text)
            if r.marker is None or r.marker.evaluate({"extra": ""}):
                out.append(r)
    return out


def dependents(names: set[str], pkgs: dict[str, tuple[str, list[str]]]) -> set[str]:
    """The installed packages that depend, directly or not, on any of `names` (not the names themselves)."""
    found, todo = set(), set(names)
    while todo:
        todo = {n for n, (_, reqs) in pkgs.items() if n not in found | names and n not in IGNORED
                and any(canonicalize_name(r.name) in todo for r in requires(reqs))}
        found |= todo
    return found


def digest(pkgs: dict[str, tuple[str, list[str]]]) -> str:
    """What an environment was built from: this interpreter's packages and versions."""
    return hashlib.sha256(json.dumps(sorted((n, v) for n, (v, _) in pkgs.items())).encode()).hexdigest()[:16]


def folder(cache: Path, spec: Spec) -> Path:
    """The spec's folder for this interpreter: its name says the spec, its hash the spec and the interpreter."""
    key = json.dumps([spec.requirements, sys.executable, sys.version])
    return cache / f"{spec.slug}-{hashlib.sha256(key.encode()).hexdigest()[:8]}"


def python_of(target: Path) -> Path:
    return target / "bin" / "python"


@dataclass(frozen=True)
class Manifest:
    """What an environment was built for and from: its `nnbench-env.json`, written last (a folder without it is not
    built), which its workers read too (`measure.environment.spec_record`)."""

    spec: str  # as the user named it: jax==0.10.1
    pins: dict[str, str]  # the pins and their companions: {"jax": "0.10.1", "jaxlib": "0.10.1"}
    changes: dict[str, tuple[str | None, str | None]]  # every version that differs: {name: (here, there)}
    python: str  # the environment's interpreter
    base_python: str  # the interpreter it was built on
    base: str  # the digest of that interpreter's packages: another digest makes the environment stale
    installer: str  # uv or pip
    built: str  # when: %Y-%m-%d %H:%M:%S
    build_s: float | None = None  # how long the build took

    @classmethod
    def read(cls, target: Path) -> Manifest | None:
        """The manifest in the folder `target`; None where it has none (not built, or half built)."""
        path = target / ENV_MANIFEST
        if not path.is_file():
            return None
        known = {f.name for f in dataclasses.fields(cls)}
        m = {k: v for k, v in json.loads(path.read_text()).items() if k in known}
        return cls(**m | {"changes": {n: tuple(c) for n, c in m["changes"].items()}})

    def write(self, target: Path) -> None:
        (target / ENV_MANIFEST).write_text(json.dumps(dataclasses.asdict(self), indent=1))


@dataclass(frozen=True)
class Sources:
    """Where measuring environments come from: the package index, the installer that builds them (uv or pip), the
    cache that keeps them."""

    index: Index
    installer: str
    cache: Path


@dataclass(frozen=True)
class Env:
    spec: Spec
    python: Path
    manifest: Manifest
    origin: str  # cached, built, or rebuilt (the base environment changed since)


def get(spec: Spec, sources: Sources, base: dict[str, tuple[str, list[str]]] | None = None) -> Env:
    """The spec's environment, from the cache or built now (one builder at a time per folder); BuildError."""
    base = base if base is not None else packages()
    target = folder(sources.cache, spec)
    sources.cache.mkdir(parents=True, exist_ok=True)
    with open(sources.cache / f".{target.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        old = Manifest.read(target)
        if old and old.base == digest(base):
            return Env(spec, python_of(target), old, "cached")
        t0 = time.perf_counter()
        try:
            m = build(target, spec, base, sources)
        except BaseException:  # a failure or an interrupt leaves no half-built environment behind
            shutil.rmtree(target, ignore_errors=True)
            raise
        m = dataclasses.replace(m, build_s=round(time.perf_counter() - t0, 1))
        m.write(target)  # last: a folder without it is not built
        return Env(spec, python_of(target), m, "rebuilt" if old else "built")


def build(target: Path, spec: Spec, base: dict, sources: Sources) -> Manifest:
    """Make the venv, install what differs, validate it; returns its manifest (BuildError naming what failed)."""
    python = make_venv(target)
    planned = install(python, spec, base, sources)
    got = packages(python)
    changes = diff(base, got)
    verify(spec, got, changes, planned)
    smoke(python, spec, changes)
    return Manifest(str(spec), spec.pinned, changes, str(python), sys.executable, digest(base), sources.installer,
                    time.strftime("%Y-%m-%d %H:%M:%S"))


def make_venv(target: Path) -> Path:
    """A fresh venv at `target` whose `nnbench-base.pth` adds this interpreter's site-packages behind its own; its
    interpreter."""
    shutil.rmtree(target, ignore_errors=True)
    venv.EnvBuilder(with_pip=False, symlinks=True, clear=True).create(target)
    python = python_of(target)
    site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True, env=clean_environ()).stdout.strip()
    paths = dict.fromkeys(sysconfig.get_paths()[k] for k in ("purelib", "platlib"))
    Path(site, "nnbench-base.pth").write_text("import site; " + "; ".join(f"site.addsitedir({p!r})" for p in paths)
                                              + "\n")
    return python


def install(python: Path, spec: Spec, base: dict, sources: Sources) -> dict | None:
    """Install into `python`'s venv what the spec moves: uv's plan (returned), each package without its dependencies;
    or the pins and their installed dependents through pip's resolver (None: pip plans as it installs)."""
    if sources.installer == "uv":
        flags = sources.index.uv_args()
        planned = plan(spec, base, flags)
        if planned:
            run([uv(), "pip", "install", "-q", "--python", str(python), "--no-deps", "--compile-bytecode", *flags,
                 *(f"{n}=={new}" for n, (_, new) in planned.items() if new)], spec)
        return planned
    run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-input",
         "--disable-pip-version-check", *sources.index.pip_args(), *spec.requirements,
         *sorted(dependents(set(spec.pinned), base))], spec)
    return None


def verify(spec: Spec, got: dict, changes: dict, planned: dict | None) -> None:
    """BuildError where the installer left a pin unmet, installed other than uv planned, or broke a requirement."""
    for n, v in spec.pinned.items():
        if n not in got or Version(got[n][0]) != Version(v):
            raise BuildError(f"{spec}: the installer left {n} at {got.get(n, ('none',))[0]}, not {v}")
    if planned is not None and changes != planned:
        raise BuildError(f"{spec}: installed {describe(changes)}, but the resolve planned {describe(planned)}")
    if conflict := conflicts(got, set(changes)):
        raise BuildError(f"{spec}: {conflict}")


def smoke(python: Path, spec: Spec, changes: dict) -> None:
    """One LeNet training step (`worker --smoke`) by each backend whose packages the environment changed; BuildError
    naming the first that fails."""
    moved = {n: (old, new) for n, (old, new) in changes.items() if n not in spec.pinned and old}  # not the added
    for fw in every():
        if set(fw.packages) & set(changes):
            r = subprocess.run([str(python), "-m", "experiments.measure.worker", "--smoke", fw.name], cwd=ROOT,
                               env=manager.environ(), capture_output=True, text=True, timeout=900)
            if r.returncode:
                why = (r.stdout.strip() or r.stderr.strip() or f"exit {r.returncode}").splitlines()[-1]
                fit = f" with {describe(moved)} moved to fit" if moved else ""
                raise BuildError(f"{spec}: nnbench's {fw.name} backend fails{fit}: {why}")


def diff(base: dict, got: dict) -> dict[str, tuple[str | None, str | None]]:
    """{name: (version here, version there)} for every package whose version differs (installers and nnbench aside)."""
    return {n: (base[n][0] if n in base else None, got[n][0] if n in got else None)
            for n in sorted(base.keys() | got.keys())
            if n not in IGNORED and (base.get(n) or (None,))[0] != (got.get(n) or (None,))[0]}


def describe(changes: dict) -> str:
    return ", ".join(f"{n} {old or '(none)'}→{new or '(none)'}" for n, (old, new) in changes.items()) or "nothing"


def conflicts(pkgs: dict[str, tuple[str, list[str]]], changed: set[str]) -> str | None:
    """The first requirement that a changed package breaks or has unmet, as a sentence; None if none."""
    for name, (version, reqs) in sorted(pkgs.items()):
        if name in IGNORED:
            continue
        for r in requires(reqs):
            dep = canonicalize_name(r.name)
            if dep not in changed and name not in changed:
                continue
            if dep not in pkgs:
                return f"{name} {version} needs {r}, which is not installed"
            if not r.specifier.contains(pkgs[dep][0], prereleases=True):
                return f"{name} {version} needs {r}, but this environment has {dep} {pkgs[dep][0]}"
    return None


def plan(spec: Spec, base: dict, flags: list[str]) -> dict[str, tuple[str | None, str | None]]:
    """uv's resolve of the pins and every package that depends on a pinned or moved one, each preferring this
    environment's version: {name: (version here or None, new version)} for what differs."""
    pinned = set(spec.pinned)
    moved: dict = {}
    for _ in range(5):  # a moved package's dependents join the resolve, until no new package moves
        named = (dependents(pinned | set(moved), base) | set(moved)) - pinned
        resolved = resolve(spec, [*spec.requirements, *sorted(named)], base, flags)
        new = {n: (base[n][0] if n in base else None, v) for n, v in resolved.items()
               if n not in IGNORED and (base.get(n) or (None,))[0] != v}
        if new.keys() <= moved.keys():
            return new
        moved = new
    return moved


def resolve(spec: Spec, wanted: list[str], base: dict, flags: list[str]) -> dict[str, str]:
    """`uv pip compile` of `wanted`, seeded with this environment's versions (uv keeps an output file's versions where
    it can), torch held: {name: version} of everything they need."""
    pinned = set(spec.pinned)
    with tempfile.TemporaryDirectory() as tmp:
        inputs, hold, out = Path(tmp, "in.txt"), Path(tmp, "hold.txt"), Path(tmp, "out.txt")
        inputs.write_text("\n".join(wanted) + "\n")
        hold.write_text("".join(f"{n}=={base[n][0]}\n" for n in HOLD if n in base and n not in pinned))
        out.write_text("".join(f"{n}=={v}\n" for n, (v, _) in base.items() if n not in pinned | set(IGNORED)))
        run([uv(), "pip", "compile", "-q", "--python", sys.executable, "--no-header", "--no-annotate",
             *flags, "-c", str(hold), str(inputs), "-o", str(out)], spec)
        found = re.findall(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;]+)", out.read_text(), re.M)
    return {canonicalize_name(n): v for n, v in found}


def run(argv: list, spec: Spec) -> None:
    """An installer's command; its failure as BuildError with the line that says why."""
    r = subprocess.run([str(a) for a in argv], capture_output=True, text=True, env=clean_environ())
    if r.returncode:
        raise BuildError(f"cannot install {spec}: {reason(r.stderr or r.stdout)}")


def listed(cache: Path | None = None) -> list[Manifest]:
    """The cached environments' manifests, oldest first."""
    cache = cache or cache_root()
    found = [m for d in sorted(cache.iterdir()) if d.is_dir() and (m := Manifest.read(d))] if cache.is_dir() else []
    return sorted(found, key=lambda m: m.built)


def clean(cache: Path | None = None, specs: list[Spec] | None = None) -> list[Path]:
    """Remove the cached environments (of these specs only, where given), half-built ones included."""
    cache = cache or cache_root()
    if not cache.is_dir():
        return []
    wanted = {folder(cache, s).name for s in specs} if specs else None
    gone = []
    for d in sorted(cache.iterdir()):
        if d.is_dir() and (wanted is None or d.name in wanted):
            shutil.rmtree(d)
            gone.append(d)
    for lock in cache.glob(".*.lock"):
        lock.unlink(missing_ok=True)
    return gone

"""A planted regression: wheels of a tiny package, `nnbench-planted`, whose op turns a known factor slower at a known
version, and a local package index over them, built in milliseconds with no network. Parent side: it writes files;
the package runs in the environments `nnbench versions` builds for it.

The package is its own runner (framework=external, docs/runners.md): in an environment that has it,

    {python} -m nnbench_planted --name planted --model {model} --ops {ops} --batch-sizes {batch_sizes}

times its op at each batch size `b`: a busy wait of 20 + b/4 ms, then the planted slowdown, a busy wait of
(factor − 1) times the op's own measured time. A busy wait loads the core like real work and is as deterministic as
a timed call gets; on a loaded machine, though, a call can still end a scheduler tick (4 ms) or a few late, and a
whole process's calls with it, so versions judged unpaired need a threshold well clear of a few ticks.

The same wheels declare a network measured in nnbench's own worker, so that a paired comparison can interleave it
(an external runner times itself): entry point `planted` in the group `nnbench.models` (`model=planted`), a chain of
round(depth × FACTOR) n×n matmuls, each with its own weights (a torch and a Flax side, with a weight map), so the
slower version's step does FACTOR times the work in all of it: forward, backward and Adam's update, which at these
sizes is most of a training step. The keys (`n`, `depth`) and batch sizes are the same in every version; the
installed version decides the work in the step.
`nnbench calibrate --planted` and `--paired`, and tests/cli/test_versions.py use them.
"""
from __future__ import annotations

import base64
import hashlib
import html
import shutil
import zipfile
from pathlib import Path

PROJECT, MODULE = "nnbench-planted", "nnbench_planted"
NAME = "planted"  # the network's entry point: model=planted
DATE = (2020, 1, 1, 0, 0, 0)  # fixed zip timestamps: the same wheel bytes (and sha256) on every build
COMMAND = "{python} -m nnbench_planted --name planted --model {model} --ops {ops} --batch-sizes {batch_sizes}"

INIT = '''"""nnbench's planted regression, version {version}: op(ms) takes {factor:g} x the time of its busy wait."""
import time

__version__ = "{version}"
FACTOR = {factor!r}


def op(ms: float) -> None:
    """Busy-wait `ms` milliseconds (the op), then (FACTOR - 1) x the op's own measured time (the regression)."""
    start = time.perf_counter()
    end = start + ms / 1e3
    while time.perf_counter() < end:
        pass
    took = time.perf_counter() - start
    end = time.perf_counter() + (FACTOR - 1) * took
    while time.perf_counter() < end:
        pass
'''

NETWORK = '''"""nnbench's planted network: round(depth × FACTOR) n×n matmuls, each its own layer, in one step."""
import models
from nnbench_planted import FACTOR


def calls(depth: int) -> int:
    """Layers, and matmuls per step: the chain's own `depth` and the planted ones."""
    return round(depth * FACTOR)


def build(n: int = 500, depth: int = 40):
    """Inputs of n features; the planted layers are weights like the others (the optimizer updates them too)."""
    return models.Network(torch=lambda: torch_chain(n, depth), flax=lambda: flax_chain(n, depth),
                          input=models.Array((n,)), target=None, loss="mean",
                          batch_sizes={"inference": (32,), "training": (32,)},
                          weights={f"layers.{i}.kernel": f"layers.{i}.weight" for i in range(calls(depth))})


def torch_chain(n, depth):
    import torch  # in the builder: the parent registers the network without importing a framework

    class Chain(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = torch.nn.ModuleList(torch.nn.Linear(n, n, bias=False) for _ in range(calls(depth)))

        def forward(self, x):
            for layer in self.layers:
                x = layer(x)
            return x

    return Chain()


def flax_chain(n, depth):
    from flax import nnx  # in the builder, as torch

    class Chain(nnx.Module):
        def __init__(self, rngs):
            self.layers = nnx.List([nnx.Linear(n, n, use_bias=False, rngs=rngs) for _ in range(calls(depth))])

        def __call__(self, x):
            for layer in self.layers:
                x = layer(x)
            return x

    return Chain(nnx.Rngs(0))
'''

MAIN = '''"""A runner for nnbench (framework=external): SAMPLES and TIMING of op(20 + batch/4 ms) per op and batch."""
import argparse
import statistics
import sys
import time

from nnbench_planted import __version__, op

p = argparse.ArgumentParser(prog="nnbench_planted")
p.add_argument("--name", default="planted")
p.add_argument("--model", default="planted")
p.add_argument("--ops", default="inference")
p.add_argument("--batch-sizes", required=True)
p.add_argument("--calls", type=int, default=10)
p.add_argument("--warmup", type=int, default=2)
a = p.parse_args()
print(f"METADATA\\t{a.name} device\\tcpu\\nMETADATA\\t{a.name} version\\t{__version__}", flush=True)
for name in a.ops.split(","):
    for batch in map(int, a.batch_sizes.split(",")):
        for _ in range(a.warmup):
            op(20 + batch / 4)
        samples = []
        for _ in range(a.calls):
            start = time.perf_counter()
            op(20 + batch / 4)
            samples.append(time.perf_counter() - start)
        point = f"{a.name}\\t{a.model}\\t{name}\\t{batch}"
        print(f"SAMPLES\\t{point}\\t{','.join(map(repr, samples))}\\nTIMING\\t{point}\\t{statistics.median(samples)!r}",
              flush=True)
sys.exit(0)
'''


def record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def wheel(out: Path, version: str, factor: float) -> Path:
    """`nnbench_planted-<version>-py3-none-any.whl` in `out`: its op `factor` x slower than the busy wait asked."""
    dist = f"{MODULE}-{version}.dist-info"
    files = {
        f"{MODULE}/__init__.py": INIT.format(version=version, factor=factor).encode(),
        f"{MODULE}/__main__.py": MAIN.encode(),
        f"{MODULE}/network.py": NETWORK.encode(),
        f"{dist}/METADATA": (f"Metadata-Version: 2.1\nName: {PROJECT}\nVersion: {version}\nSummary: nnbench's "
                             f"planted regression (op x {factor:g})\nRequires-Python: >=3.8\n").encode(),
        f"{dist}/WHEEL": b"Wheel-Version: 1.0\nGenerator: nnbench\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        f"{dist}/top_level.txt": f"{MODULE}\n".encode(),
        f"{dist}/entry_points.txt": f"[nnbench.models]\n{NAME} = {MODULE}.network:build\n".encode(),
    }
    files[f"{dist}/RECORD"] = ("".join(f"{p},{record_hash(d)},{len(d)}\n" for p, d in files.items())
                               + f"{dist}/RECORD,,\n").encode()
    path = out / f"{MODULE}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in files.items():
            info = zipfile.ZipInfo(name, DATE)
            info.external_attr = 0o644 << 16
            z.writestr(info, data, zipfile.ZIP_DEFLATED)
    return path


def wheels(out: Path, factors: dict[str, float]) -> list[Path]:
    """One wheel per version in `out` (created), each with its slowdown factor: {"1.0": 1.0, "1.5": 1.3, ...}."""
    out.mkdir(parents=True, exist_ok=True)
    return [wheel(out, v, f) for v, f in factors.items()]


def steps(versions: list[str], first_slow: str, factor: float) -> dict[str, float]:
    """Factors for a series with one planted step: 1 before `first_slow`, `factor` from it on."""
    return {v: factor if versions.index(v) >= versions.index(first_slow) else 1.0 for v in versions}


def index(built: list[Path], root: Path) -> str:
    """A PEP 503 package index at root/simple over copies of the wheels; its file:// URL (for --index-url)."""
    (root / "files").mkdir(parents=True, exist_ok=True)
    page = root / "simple" / PROJECT
    page.mkdir(parents=True, exist_ok=True)
    links = []
    for w in built:
        shutil.copy2(w, root / "files" / w.name)
        digest = hashlib.sha256(w.read_bytes()).hexdigest()
        links.append(f'<a href="../../files/{html.escape(w.name)}#sha256={digest}" data-requires-python="&gt;=3.8">'
                     f"{html.escape(w.name)}</a><br/>")
    page.joinpath("index.html").write_text("<!DOCTYPE html><html><body>\n" + "\n".join(links) + "\n</body></html>\n")
    (root / "simple" / "index.html").write_text(
        f'<!DOCTYPE html><html><body><a href="{PROJECT}/">{PROJECT}</a></body></html>\n')
    return (root / "simple").resolve().as_uri()


def environments(workdir: Path, versions: dict[str, float]) -> list:
    """nnbench-planted's versions (version: slowdown), one environment each, built offline from a local index."""
    from experiments.common.errors import BadInput  # the parent's: this module's top also serves the wheels' tests
    from experiments.harness import envs, installers  # packaging and the installers: only where environments are made

    url = index(wheels(workdir / "wheels", versions), workdir / "index")
    sources = envs.Sources(installers.Index(url), installers.installer(), workdir / "envs")
    try:
        return [envs.get(s, sources, envs.packages()) for s in envs.parse([f"{PROJECT}=={','.join(versions)}"])]
    except envs.BuildError as e:
        raise BadInput(f"the planted environments can't be built: {e}") from None

"""Typed config schema (Hydra ConfigStore), so a misspelled key or option fails at composition; the door
(`sweep.preflight.typed`) turns each composed job into a `Config`, and nothing below it reads the raw config.

Every key's default lives here, in the schema, unless it depends on a config group's option (the framework's
`compile` and `memory_format`, the bench budgets, a model's keys), which its yaml in conf/ sets. The names every
other module uses are defined here once: frameworks (one `<name>_backend.py` each), ops, and the default report
baseline. Hydra is imported only by `register()`, so the worker can import these names without it.
"""
from __future__ import annotations

import dataclasses
import functools
import secrets
import subprocess
import sys
from dataclasses import dataclass, field, fields
from enum import Enum
from pathlib import Path
from typing import Any, Optional

from omegaconf import MISSING, OmegaConf

from experiments.common.devices import accelerated
from experiments.common.protocol import Budget

ROOT = Path(__file__).resolve().parents[2]  # the suite's checkout (conf/, experiments/, models/)
CONF = ROOT / "experiments" / "conf"  # shipped inside the package (a link to the checkout's conf/)
BACKENDS = ROOT / "experiments" / "measure" / "backends"
# The README's sweep: the one spelling the self-checks and the tests use.
README_SWEEP = ("framework=jax,torch", "model=lenet")


if sys.version_info >= (3, 11):
    from enum import StrEnum
else:
    class StrEnum(str, Enum):
        """Python 3.11's enum.StrEnum: each member is its own text (compares, hashes and prints as it)."""

        def __str__(self) -> str:
            return self.value

        def __format__(self, spec: str) -> str:
            return format(self.value, spec)


def bench_budget(name: str) -> Budget:
    """The timing budget of conf/bench/<name>.yaml, read without Hydra (the self-checks time outside a sweep)."""
    import yaml  # only the self-checks read a bench file directly

    bench = yaml.safe_load((CONF / "bench" / f"{name}.yaml").read_text())
    return Budget(**{f.name: bench[f.name] for f in fields(Budget)})


def backends() -> list[str]:
    """Frameworks measured in Python, by naming convention: `measure/backends/<name>_backend.py` (not imported)."""
    return sorted(p.stem.removesuffix("_backend") for p in BACKENDS.glob("*_backend.py"))


EXTERNAL = "external"  # the framework option of a runner in any language (harness/external.py): no backend, unpaired


def frameworks() -> list[str]:
    """The `framework` options: the backends, and `external` (a runner in any language, harness/external.py)."""
    return backends() + [EXTERNAL]


Framework = StrEnum("Framework", {name: name for name in frameworks()})


class Precision(StrEnum):
    fp32 = "fp32"
    bf16 = "bf16"
    fp16 = "fp16"
    fp64 = "fp64"


class Device(StrEnum):
    auto = "auto"  # the accelerator the framework sees (jax: a TPU, then a GPU; torch: a GPU), else the CPU
    cpu = "cpu"
    gpu = "gpu"
    tpu = "tpu"


class MemoryFormat(StrEnum):
    contiguous = "contiguous"  # torch: NCHW, as users write it
    channels_last = "channels_last"  # torch: NHWC strides
    nhwc = "nhwc"  # jax: XLA's own layout for images


CompileMode = StrEnum("CompileMode", {m: m for m in ("default", "reduce-overhead")})  # torch.compile(mode=...)


# What `runtime.allocator` puts in the worker's environment. glibc gave freed activation memory back to the kernel
# and faulted it in again, depending on the process's history: torch ResNet bs32 inference held 73-77 ms in
# processes taking ~27k minor faults per call and 56.6 ms in one taking 11.5k; with these thresholds, 0 faults
# and 44-45 ms.
ALLOCATORS = {  # runtime.allocator: the worker's environment for it
    # glibc with mmap/trim thresholds that keep freed activations (no fault-driven speed levels)
    "glibc": {"MALLOC_MMAP_THRESHOLD_": str(32 << 20), "MALLOC_TRIM_THRESHOLD_": str(1 << 30)},
    "system": {},  # the environment as it is
    "jemalloc": {"LD_PRELOAD": "libjemalloc.so.2"},  # Debian's libjemalloc2
    "tcmalloc": {"LD_PRELOAD": "libtcmalloc_minimal.so.4"},  # Debian's libtcmalloc-minimal4
}


Allocator = StrEnum("Allocator", {a: a for a in ALLOCATORS})


class Start(StrEnum):
    """How a job starts its workers (runtime.start)."""

    fork = "fork"  # from a fork server that imported the framework once per job (measure/server.py)
    spawn = "spawn"  # a fresh interpreter each, importing everything again


class Sync(StrEnum):
    """How calls are timed (bench.sync): each one synced, or pipelined as a loop dispatches them (timing.py)."""

    auto = "auto"  # pipelined on an accelerator, synced on the CPU (where a call returns done: the numbers stay)
    synced = "synced"  # every call waits for its result: on an accelerator each pays a round trip to the device
    pipelined = "pipelined"  # a block's calls dispatched back to back, one wait at its end


class Op(StrEnum):
    inference = "inference"
    training = "training"
    grad = "grad"


OPS = tuple(op.value for op in Op)
PRECISIONS = tuple(p.value for p in Precision)
DEFAULT_BASELINE = "torch-eager fp32"  # the variant ("<mode> <precision>") speedups are measured against
# A paired speedup within 1 ± this is "no change" (report.threshold), chosen with `python -m
# experiments.selfcheck.paired` (docs/evidence.md); and each verdict's significance level (report.alpha).
PAIRED_THRESHOLD, ALPHA = 0.03, 0.05
# The config keys a comparison spans: a cell's variants differ in these and in nothing else (sweep.paired_engine).
VARIANT_KEYS = ("framework", "precision", "device", "runtime", "external")


# How a paired cell's variants take turns (bench.paired_design, harness/designs.py): `auto` by the device, or forced:
# a worker per variant in bursts, variants of one environment inside one worker, or whole workers alternating.
PAIRED_DESIGNS = ("auto", "bursts", "in-process", "alternating")
PairedDesign = StrEnum("PairedDesign", {d: d for d in PAIRED_DESIGNS})


@dataclass
class FrameworkConf:
    name: Framework = MISSING
    compile: bool = MISSING  # jax: jit (idiomatic default), torch: eager by default
    compile_mode: CompileMode = CompileMode.default  # torch: reduce-overhead adds CUDA graphs (GPUs)
    memory_format: Optional[MemoryFormat] = MISSING  # torch: contiguous or channels_last; jax: nhwc; external: null
    threads: Optional[int] = None  # intra-op threads (torch.set_num_threads; jax: the cores it runs on); null: its own


@dataclass
class PrecisionConf:
    name: Precision = MISSING
    tf32: bool = False  # fp32 matmuls/convs may use TF32 on GPUs only when asked, on both sides


@dataclass
class BenchConf(Budget):
    """The timing budget (its fields are timing.Budget's, set in conf/bench/*.yaml) and the harness's own keys."""

    sync: Sync = MISSING  # auto, synced or pipelined: how calls are timed (docs/measuring.md)
    processes: int = MISSING  # fresh measuring processes per point (paired: trials, one process per variant each)
    machine_check_s: float = MISSING  # the sweep's check of the machine's own noise, before its first job (0: none)
    timeout_s: float = MISSING  # per point, worker start and compile included
    remeasure: int = 2  # unpaired: more workers at most, per job, for processes read far off while others ran
    paired: bool = True  # a cell's variants take turns in bursts of warm workers (false: each job on its own)
    rounds: int = MISSING  # paired: bursts per variant, per cell and trial
    burst_s: float = 0.02  # paired: one burst's length
    paired_design: PairedDesign = PairedDesign.auto  # paired: how variants take turns; auto: by the device they hold
    max_processes: int = MISSING  # paired: more trials, up to this many, for a cell whose ratio is not settled...
    target_ratio_ci: float = MISSING  # ...while its plain 95% interval is wider than ±this, or a verdict inconclusive


@dataclass
class MlflowConf:
    tracking_uri: Optional[str] = None  # null: $MLFLOW_TRACKING_URI, else sqlite:///mlruns/mlflow.db (artifacts beside)
    experiment_name: str = "nnbench"
    parent_run_id: Optional[str] = None  # a sweep's parent run goes under this run (nnbench versions and bisect)


@dataclass
class RuntimeConf:
    python: Optional[str] = None  # interpreter (a venv's) that runs the workers; null: the one running the sweep
    allocator: Allocator = Allocator.glibc  # the workers' malloc: glibc (tuned thresholds), system, jemalloc, tcmalloc
    start: Start = Start.fork  # fork: each job imports its framework once, in a fork server; spawn: once per worker
    compile_cache: bool = True  # a point's later processes load what its first one compiled (per sweep and host)


@dataclass
class ExternalConf:
    """framework=external: a runner printing seed 000's lines (docs/runners.md); top-level keys, so that they
    can be set in the same sweep as jax and torch."""

    name: Optional[str] = None  # display name, e.g. Lux: the runs' mode
    command: Optional[str] = None  # template with {model} {precision} {device} {ops} {batch_sizes} {python}


@dataclass
class ReportConf:
    baseline: str = DEFAULT_BASELINE  # the variant ("<mode> <precision>") speedups are measured against
    threshold: float = PAIRED_THRESHOLD  # a paired speedup within 1 ± this is "no change"; beyond, faster or slower
    alpha: float = ALPHA  # each verdict's significance level (Benjamini-Hochberg across a sweep's cells)
    fail_on_regression: bool = False  # exit 1, naming them, where a variant is slower than the baseline
    along: Optional[str] = None  # a swept key (runtime.python): each variant against the one before it along it
    profile_changed: bool = False  # paired: profile both sides of each cell judged slower or faster (profile=true's)


@dataclass
class Config:
    framework: FrameworkConf = field(default_factory=FrameworkConf)
    model: Any = MISSING  # the model's name and keys (matmul_chain has n, m, depth); validated by models.load
    precision: PrecisionConf = field(default_factory=PrecisionConf)
    bench: BenchConf = MISSING  # conf/bench/*.yaml sets every key
    batch_size: Optional[int] = None  # null: the model's batch lists (inference and training differ); an int: that size
    ops: list[Op] = field(default_factory=lambda: [Op.inference, Op.training])  # grad: the loss gradient only
    device: Device = Device.auto  # auto: the accelerator the framework sees, else the CPU; gpu, tpu fail without one
    seed: int = 0  # of the weights and inputs: the same numpy arrays for both frameworks
    repeat: int = 0  # replicate index: repeat=0,1,2 measures every point in 3 rounds of fresh processes
    resume: bool = False  # skip points with a FINISHED run of the same config and environment in the store
    profile: bool = False  # one more worker per job profiles each point after its timed ones (docs/profiling.md)
    parity: bool = True  # once per sweep and model, a process checks that jax and torch compute the same function
    mlflow: MlflowConf = field(default_factory=MlflowConf)
    runtime: RuntimeConf = field(default_factory=RuntimeConf)
    external: ExternalConf = field(default_factory=ExternalConf)
    report: ReportConf = field(default_factory=ReportConf)


def logged(config: Config) -> dict:
    """The config as plain data, the one place it is derived: what a point logs (config.yaml, the flattened
    `config.*` params) and what its resume key hashes. Options by name; keys left unset (MISSING) are left out.
    The typed config holds values only (its interpolations resolved at the door), so this is OmegaConf's own
    rendering (`to_container(structured(config), enum_to_str=True)`) without building its nodes: a sweep derives
    it for every point and cell."""
    def plain(v):
        if isinstance(v, Enum):
            return v.name
        if isinstance(v, dict):
            return {k: plain(x) for k, x in v.items() if not (isinstance(x, str) and x == MISSING)}
        return [plain(x) for x in v] if isinstance(v, (list, tuple)) else v

    return plain(dataclasses.asdict(config))


def register(pythons: list[str] | tuple[str, ...] = ()) -> None:
    """The schema and the resolvers, for Hydra (the sweep's processes only). `pythons`: the sweep's other
    interpreters (runtime.python), whose networks become model= options too (`see_packages_of`)."""
    from hydra.core.config_store import ConfigStore  # not at the top: the worker imports these names without Hydra

    see_packages_of(pythons)
    ConfigStore.instance().store(name="schema", node=Config)
    for name, node in installed_models().items():  # model=<entry point>: composed and type-checked as built-ins
        ConfigStore.instance().store(group="model", name=name, node=node)
    OmegaConf.register_new_resolver("nnbench.size", size_for_device, replace=True, use_cache=True)
    OmegaConf.register_new_resolver("nnbench.unique", lambda: UNIQUE, replace=True, use_cache=True)
    OmegaConf.register_new_resolver("nnbench.cwd", lambda: str(Path.cwd()), replace=True, use_cache=True)


def see_packages_of(pythons: list[str] | tuple[str, ...]) -> None:
    """Put each interpreter's own site-packages at the end of sys.path: a package installed only in the
    environments compared (a network's package, `nnbench versions mypkg==1.0,1.1`) is then seen by the model group
    and the door here, while everything this interpreter has still comes from its own. The declaration is read from
    the first interpreter that has the package; each worker imports its own environment's version."""
    for python in dict.fromkeys(map(str, pythons)):
        if not Path(python).is_file() or python == sys.executable:
            continue  # not an interpreter (the door says so), or this one
        sys.path += [path for path in site_packages(python) if path not in sys.path and Path(path).is_dir()]


@functools.cache
def site_packages(python: str) -> tuple[str, ...]:
    """The interpreter's purelib and platlib (asked once per process: `versions` registers for each pair)."""
    r = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib']); "
                        "print(sysconfig.get_paths()['platlib'])"], capture_output=True, text=True)
    return tuple(dict.fromkeys(p for p in r.stdout.split("\n") if p)) if r.returncode == 0 else ()


def installed_models() -> dict[str, Any]:
    """A config node per network of an installed package (entry-point group `nnbench.models`): `name` and its
    build's keys, typed by their defaults (a key without one must be given). A package that fails to import is
    left out here: `model=<it>` then fails in models.load, in one line."""
    import inspect  # only the sweep's processes register the model group (and import a package's networks)
    import models

    out = {}
    for name, ep in models.installed().items():
        try:
            build = getattr(loaded := ep.load(), "build", loaded)
            keys = [(p.name, type(p.default) if type(p.default) in (int, float, bool, str) else Any,
                     field(default=MISSING if p.default is inspect.Parameter.empty else p.default))
                    for p in inspect.signature(build).parameters.values()
                    if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
            out[name] = dataclasses.make_dataclass(f"{name}_model", [("name", str, name), *keys])
        except Exception:  # the user's package: models.load reports it in one line
            continue
    return out


# `${nnbench.unique:}` in the output dirs: drawn once in the launching process, so two sweeps started in the same
# second get different dirs. Job configs see the same value: Hydra copies the master config's resolver cache into
# each one (load_sweep_config), and that cache is pickled with it for joblib and submitit.
UNIQUE = secrets.token_hex(3)


def size_for_device(device: Device | str, accelerator_size: int, cpu_size: int) -> int:
    """`${nnbench.size:${device},ACCELERATOR,CPU}`: a preset's size where it will run: a GPU's or a TPU's (device=gpu,
    tpu, or auto on a machine that has one), else the CPU's."""
    return accelerator_size if accelerated(getattr(device, "value", device)) else cpu_size

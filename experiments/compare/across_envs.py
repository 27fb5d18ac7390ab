"""Comparisons across measuring environments, what `nnbench versions` and `bisect` share: where the environments come
from (`sources`: a harness.envs.Sources, the index, the installer, the cache), a package's versions met one by one
(`Range`), the paired design or the unpaired sweep, the sweep's overrides validated before anything is built (`jobs`),
and the unpaired sweep across the environments (`across`)."""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from experiments.common.child import run_to_end
from experiments.common.config import EXTERNAL, ROOT
from experiments.common.errors import OK, BadInput

if TYPE_CHECKING:
    from experiments.harness.envs import Sources

# Keys of a sweep that `nnbench versions` and `bisect` set themselves, and what to use instead.
SET_BY_COMMAND = {"runtime.python": "it runs one environment per version", "repeat": "use --repeats",
                  "mlflow.tracking_uri": "use --uri", "mlflow.experiment_name": "use --experiment",
                  "mlflow.parent_run_id": "its own parent run holds the sweep"}
UNPAIRABLE = ("framework=external can't be paired: its runner times itself, so its bursts can't be interleaved with "
              "another worker's; add --unpaired")


def sources(index_url: str | None = None, find_links=(), extra_index_urls=(), installer: str | None = None,
            cache: Path | None = None) -> Sources:
    """The harness.envs.Sources the options name (None: pip's index, uv when installed, $NNBENCH_ENV_CACHE); BadInput
    naming the fix."""
    from experiments.harness import envs, installers  # packaging and the installers: only for the commands that build

    try:
        index = installers.Index(index_url, tuple(find_links), tuple(extra_index_urls))
        return envs.Sources(index, installers.installer(installer), cache or envs.cache_root())
    except ValueError as e:
        raise BadInput(str(e)) from None


def specs(texts: list[str]) -> list:
    """The versions asked for (PACKAGE==V1,V2,...; several packages: their cross product) as harness.envs.Spec;
    BadInput naming the fix."""
    from experiments.harness import envs  # packaging: only once the arguments parse

    try:
        return envs.parse(texts)
    except ValueError as e:
        raise BadInput(str(e)) from None


@dataclass(frozen=True)
class Sweep:
    """The sweep a command measures in each environment: its overrides, its rounds (repeat=0..N-1, unpaired), the
    store, and the command's name for its errors; `quiet`: its lines go to stderr (--json)."""

    command: str
    overrides: tuple[str, ...]
    uri: str
    experiment: str
    repeats: int = 1
    quiet: bool = False


def unpaired(overrides: list[str]) -> list[str]:
    """The overrides of the unpaired sweep (--unpaired, or one environment): bench.paired=false, unless they set it,
    so that each environment's points are measured by processes of their own, one after another, as its verdicts
    (Welch's t on process medians) assume, and the door's jobs are the ones measured (bisect looks their points up
    in the store by their config)."""
    if any(o.lstrip("+~").startswith("bench.paired=") for o in overrides):
        return list(overrides)
    return [*overrides, "bench.paired=false"]


def paired_design(fields: dict, given: list[str], unpaired_fix: str | None, repeats: int,
                  what: str = "the paired comparison"):
    """The paired design (compare.paired.Design of `fields`), checked before anything is listed or built; None
    where the command compares unpaired, `unpaired_fix` then saying what the design flags `given` need. BadInput
    naming the fix for a flag that doesn't fit."""
    from experiments.compare import paired  # the paired sweep's module: only once the arguments parse

    if unpaired_fix is not None:
        if given:
            raise BadInput(f"{', '.join(given)} set {what}: {unpaired_fix}")
        return None
    if repeats != 1:
        raise BadInput("--repeats replicates the unpaired sweep: add --unpaired, or set --pairs N for more pairs")
    return paired.Design(**fields)


def fitted(design, jobs: list) -> None:
    """BadInput where the jobs can't be compared paired (a runner that times itself) or `design` doesn't fit them."""
    if any(j.config.framework.name == EXTERNAL for j in jobs):
        raise BadInput(UNPAIRABLE)
    design.fits(jobs)


def jobs(sweep: Sweep, environments=None, first=lambda jobs: None) -> list:
    """The sweep's jobs, composed and validated (the overrides, the store, `first`: the command's own checks of
    them, then this interpreter's probe) before anything is built; BadInput naming the fix. A `model=` this
    interpreter doesn't know may be a network that only the environments compared declare (`nnbench versions
    mypkg==1.0,1.1 model=mynet`): then `environments()` builds them and the overrides are checked again with their
    networks."""
    from experiments.common.config import register  # Hydra is slow to import: only for the commands that sweep
    from experiments.sweep import commandline

    if sweep.repeats < 1:
        raise BadInput(f"--repeats must be at least 1 (got {sweep.repeats})")
    for o in sweep.overrides:
        key = o.lstrip("+~").split("=", 1)[0]
        if key in SET_BY_COMMAND:
            raise BadInput(f"{key} is set by nnbench {sweep.command}: {SET_BY_COMMAND[key]}")
    argv = ["-m", *sweep.overrides, f"mlflow.tracking_uri={sweep.uri}", f"mlflow.experiment_name={sweep.experiment}"]
    register()
    composed = []  # once the jobs are composed, a BadInput is not an unknown network's

    def checked(jobs: list) -> None:
        composed.append(True)
        first(jobs)

    try:
        validated = commandline.explained(argv, checked)
    except BadInput:
        if composed or environments is None or not any(o.lstrip("+").startswith("model=") for o in sweep.overrides):
            raise
        register([str(e.python) for e in environments()])
        validated = commandline.explained(argv, first)
    if validated is None or validated.jobs is None:
        raise BadInput(f"nnbench {sweep.command} runs the basic sweeper's jobs: drop hydra/sweeper and the print "
                       "flags")
    return validated.jobs


def across(sweep: Sweep, pythons: list[Path], parent: str) -> int:
    """The sweep across these interpreters, interleaved (runtime.python varies fastest), under `parent`; its exit code.
    Its output goes to this terminal. It is the unpaired sweep (--unpaired): the paired one would measure the
    environments as one cell's variants (an override may still ask for that)."""
    quoted = ",".join(f"'{p}'" for p in pythons)
    rounds = [f"repeat={','.join(map(str, range(sweep.repeats)))}"] if sweep.repeats > 1 else []
    argv = [sys.executable, "-m", "experiments.run", "-m", "bench.paired=false", *sweep.overrides, *rounds,
            f"runtime.python={quoted}", f"mlflow.tracking_uri={sweep.uri}",
            f"mlflow.experiment_name={sweep.experiment}", f"mlflow.parent_run_id={parent}"]
    environ = os.environ | {"PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    return run_to_end(argv, env=environ, stdout=sys.stderr if sweep.quiet else None).returncode


class Range:
    """A package's versions as a bisect meets them: each one's environment, built (or taken from the cache) when first
    asked for, or None where it can't be built; the versions skipped, with why; and the bisect's lines."""

    def __init__(self, package: str, versions: list[str], sources: Sources):
        from experiments.harness import envs  # packaging: only once the arguments are validated

        self.package, self.versions, self.sources, self.base = package, versions, sources, envs.packages()
        self.envs: dict[str, object] = {}  # version -> its Env, or None
        self.skipped: dict[str, str] = {}  # version -> why it can't be compared

    def say(self, line: str) -> None:
        print(f"bisect: {line}", flush=True)

    def skip(self, v: str, why: str) -> None:
        self.skipped[v] = why
        self.say(f"skip {v}: {why}")

    def env(self, v: str):
        """The version's environment, or None (skipped: said once)."""
        from experiments.harness import envs  # packaging: only once the arguments are validated

        if v not in self.envs:
            try:
                e = envs.get(envs.Spec(((self.package, v),)), self.sources, self.base)
                self.say(f"{self.package} {v}: environment {e.origin}; differs in {envs.describe(e.manifest.changes)}")
                self.envs[v] = e
            except envs.BuildError as e:
                self.envs[v] = None
                self.skip(v, str(e))
        return self.envs[v]


def manage(cache: Path, specs: list, clean: bool) -> int:
    """The environments' cache: each one listed, or (`clean`) those of `specs` (all, without) removed."""
    from experiments.harness import envs  # packaging: only once the arguments parse

    if clean:
        gone = envs.clean(cache, specs or None)
        print(f"removed {len(gone)} environments from {cache}")
        return OK
    found = envs.listed(cache)
    for m in found:
        print(f"{m.spec}: {envs.describe(m.changes)} ({m.installer}, built {m.built} from {m.base_python}) {m.python}")
    print(f"{len(found)} environments in {cache}")
    return OK

"""What `nnbench bisect` does once its arguments parse: the package's released versions in the range listed, the one
point checked, and the one search for the first changed version, under one parent run tagged nnbench.bisect. A
version at the start's level moves the range's start up to it, a changed one moves its end down; a version that
can't be built or measured is skipped. Its steps are judged paired (compare.bisection_paired: each probe against the
start, an inconclusive step stops the search) or unpaired (compare.bisection_unpaired: each probe's sweep against
the last version at the start's level)."""
from __future__ import annotations

import functools
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from experiments.common.errors import INTERRUPTED, LOST, OK, BadInput
from experiments.compare import across_envs
from experiments.compare.bisection_paired import PairedSteps
from experiments.compare.bisection_unpaired import UnpairedSteps
from experiments.compare.across_envs import Range, Sweep
from experiments.store.uris import validate

if TYPE_CHECKING:
    from experiments.harness.envs import Sources


@dataclass(frozen=True)
class Bisection:
    """What `nnbench bisect` is asked: the package, its range A..B (`pre`: pre-releases and nightlies too), the sweep
    of the one point followed, where the environments come from, each verdict's threshold and alpha, the paired design
    (None: each version's sweep judged unpaired), and whether a first change to slower fails (exit 1)."""

    package: str
    range: str
    sweep: Sweep
    sources: Sources
    threshold: float
    alpha: float
    design: object = None  # a compare.paired.Design
    pre: bool = False
    fail_on_regression: bool = False
    issue: Path | None = None  # paired: a folder for an upstream report draft of the first change, where slower


def bisect(b: Bisection) -> tuple[int, dict]:
    """The first changed version, found and reported; the exit code and the answer (what --json prints)."""
    versions = listed(b)
    validate(b.sweep.uri, b.sweep.experiment, "--uri")
    job = across_envs.jobs(b.sweep, lambda: [start_env(b, versions[0])], functools.partial(checked, b))[0]
    return searched(b, Range(b.package, versions, b.sources), job)


def searched(b: Bisection, r: Range, job) -> tuple[int, dict]:
    """The search over the versions `r` on the sweep's one job, under the bisect's parent run, and its report; the
    exit code (1 where a step stayed inconclusive, or a gate failed) and the answer."""
    from experiments.compare import paired  # Hydra and mlflow are slow to import: only once the point is checked
    from experiments.store import tracking
    from experiments.store.parent import parent_run

    store = tracking.Store(b.sweep.uri)
    title, experiment_id = named(b, job), store.open(b.sweep.experiment)
    r.say(f"{len(r.versions)} versions of {b.package} in {b.range}: {', '.join(r.versions)}")
    try:
        with parent_run(store, experiment_id, title, params(b, r.versions), kind="bisect") as run:
            steps = PairedSteps(b, r, run.run_id) if b.design else UnpairedSteps(b, r, job, run.run_id)
            found, note = search(steps, r)
            code, answer = steps.report(found, note, title, run)
    except paired.Stopped:  # a step's sweep was interrupted: it said so, and closed its runs
        return INTERRUPTED, {}
    if code == OK and b.fail_on_regression and answer.get("verdict") == "slower":
        print(f"nnbench bisect: error: slower from {b.package} {answer['first_changed']} on (its parent run "
              f"{run.run_id})", file=sys.stderr)
        return LOST, answer
    return code, answer


def listed(b: Bisection) -> list[str]:
    """The package's released versions in the range, from the index; BadInput naming the fix where there are no
    two."""
    from packaging.version import InvalidVersion, Version  # packaging: only once the arguments parse
    from experiments.harness import installers

    try:
        installers.in_range([], b.range)  # the range's form first: "is not A..B", "runs backwards"
        pre = b.pre or any(Version(v).is_prerelease for v in b.range.split("..") if v)
        listing = installers.released(b.package, b.sources.index, pre)
        versions = installers.in_range(listing, b.range, pre)
    except (ValueError, InvalidVersion) as e:
        raise BadInput(f"{e}") from None
    except LookupError as e:
        raise BadInput(f"cannot list the versions of {b.package}: {e}: fix the name, or pass --index-url") from None
    if len(versions) < 2:
        raise BadInput(f"{b.package} has {len(versions)} released version(s) in {b.range} "
                       f"({', '.join(versions) or 'none'}; the index has {', '.join(listing[-8:]) or 'none'}): "
                       "widen the range")
    return versions


def start_env(b: Bisection, version: str):
    """The range's first version's environment (built, or from the cache), for a network only it declares."""
    from experiments.harness import envs  # packaging: only once the arguments parse

    try:
        return envs.get(envs.Spec(((b.package, version),)), b.sources, envs.packages())
    except envs.BuildError as e:
        raise BadInput(f"{e}: the range's first version is needed to check model=; fix the range, or pass "
                       "--index-url/--find-links (nothing was measured)") from None


def checked(b: Bisection, jobs: list) -> None:
    """BadInput naming the fix, unless the sweep is one job of one point with one op that the steps can judge
    (before the probes)."""
    if len(jobs) != 1 or len(jobs[0].points) != 1 or len(jobs[0].points[0].ops) != 1:
        n = sum(len(p.ops) for j in jobs for p in j.points)
        raise BadInput(f"the overrides make {n} measured ops; bisect follows one: give one model, one op and one "
                       "batch size, e.g. model=lenet ops=[training] batch_size=128")
    if b.design is None and jobs[0].config.bench.processes * b.sweep.repeats < 2:
        raise BadInput("bisect --unpaired judges versions by their processes, and this sweep measures one per "
                       "version: use bench=default (5 processes), or bench.processes=5, or --repeats 5")
    if b.design is not None:
        across_envs.fitted(b.design, jobs)


def named(b: Bisection, job) -> str:
    """The parent run's name: `bisect <package> A..B · <model> <op> bs<batch>`, and the variant where not the
    default."""
    point = job.points[0]
    return (f"bisect {b.package} {b.range} · {job.config.model['name']} {point.ops[0]} bs{point.batch_size}"
            + (f" · {job.variant}" if job.variant != "jax-jit fp32" else ""))


def params(b: Bisection, versions: list[str]) -> dict:
    """The parent run's params: what was asked, and (paired) the design's overrides."""
    s = b.sweep
    out = {"package": b.package, "range": b.range, "versions": " ".join(versions), "overrides": " ".join(s.overrides),
           "threshold": b.threshold, "alpha": b.alpha, "repeats": s.repeats}
    if b.design:
        out |= {"paired": "true", "design": " ".join(b.design.overrides()) or "the preset's"}
    return out


def search(steps, r: Range) -> tuple[tuple | None, str]:
    """The one bisection: (lo, hi, the evidence of the step lo → hi, hi the first changed version), or None; and what
    to say about it. `steps` (PairedSteps, UnpairedSteps) compares versions: the range's `ends` that can be
    compared; a `probe` against the start (paired) or the last version at its level (`lo`, unpaired), None where it
    is skipped; whether it `changed` (None: unsettled, which stops the search and is said by `stopped`); what to say
    where the ends don't differ (`unchanged`); the `evidence` of the first change and its `note`."""
    vs = r.versions
    if (ends := steps.ends()) is None:
        return None, "fewer than two versions in the range could be measured"
    lo, hi, evidence = ends
    if not steps.changed(evidence):
        return None, steps.unchanged(lo, hi, evidence)
    start = lo
    while hi - lo > 1:
        mid = next((i for i in sorted(range(lo + 1, hi), key=lambda i: abs(i - (lo + hi) // 2))
                    if vs[i] not in r.skipped), None)
        if mid is None:
            between = ", ".join(vs[lo + 1:hi])
            return (lo, hi, steps.evidence(lo, hi)), (f"{between} could not be measured: the change is in {between} "
                                                      f"or {vs[hi]}")
        if (evidence := steps.probe(start, lo, mid)) is None:
            continue
        if (changed := steps.changed(evidence)) is None:
            return None, steps.stopped(evidence, lo, hi, f"{vs[mid]} against the start {vs[start]}")
        lo, hi = (lo, mid) if changed else (mid, hi)
    evidence = steps.evidence(lo, hi)
    return (lo, hi, evidence), steps.note(lo, hi, evidence)

"""What `nnbench versions` measures once its arguments parse: one measuring environment per spec (built, or from the
cache), then each version compared paired with the one before it on every cell (the paired sweep along
runtime.python), or the unpaired sweep across the environments followed by each point's history along them; each
under one parent run tagged nnbench.versions."""
from __future__ import annotations

import functools
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from experiments.common.errors import OK, BadInput
from experiments.compare import across_envs, history
from experiments.compare.across_envs import Sweep
from experiments.stats.verdicts import ALPHA, THRESHOLD

if TYPE_CHECKING:
    from experiments.harness.envs import Sources


@dataclass(frozen=True)
class Versions:
    """What `nnbench versions` is asked: the specs (as typed, and parsed), the sweep measured in each one's
    environment, where the environments come from, the paired design (None: the unpaired sweep), a file to append
    the paired verdicts' Markdown to, whether a version slower than the one before it fails (exit 1), and a folder
    for upstream report drafts of the slower cells (compare.upstream)."""

    given: tuple[str, ...]
    specs: tuple  # harness.envs.Spec
    sweep: Sweep
    sources: Sources
    design: object = None  # a compare.paired.Design
    markdown: Path | None = None
    fail_on_regression: bool = False
    issue: Path | None = None  # a folder for upstream report drafts of the cells judged slower


def compare(v: Versions) -> tuple[int, dict]:
    """The environments built and compared; the exit code and the answer (what --json prints)."""
    built_once = functools.cache(lambda: build(v.specs, v.sources))  # built once, by the door or here
    across_envs.jobs(v.sweep, built_once, functools.partial(across_envs.fitted, v.design) if v.design else
                      lambda jobs: None)
    built = built_once()
    if v.design:
        return compare_paired(v, built)
    if len(v.specs) == 1:  # still a measurement (the sweep in that environment), but nothing to follow along
        print(f"nnbench versions: note: one environment ({v.specs[0]}), nothing to follow along versions: list two "
              "or more versions to compare them", file=sys.stderr)
    return measure(v, built)


def build(specs, sources: Sources) -> list:
    """Every spec's environment, built or from the cache; BadInput at the first that can't be built."""
    from experiments.harness import envs  # packaging: only once the arguments parse

    base, out = envs.packages(), []
    print(f"environments for {len(specs)} specs: each built once (a minute or more), then cached", flush=True)
    for spec in specs:
        try:
            env = envs.get(spec, sources, base)
        except envs.BuildError as e:
            raise BadInput(f"{e}: fix the spec, or pass --index-url/--find-links (nothing was measured)") from None
        cached = env.origin == "cached"
        took = f" in {env.manifest.build_s:.0f} s" if not cached else ""
        print(f"{spec}: {env.origin}{took} with {env.manifest.installer if cached else sources.installer}"
              f"; differs in {envs.describe(env.manifest.changes)}")
        out.append(env)
    return out


def named(v: Versions, built: list) -> tuple[str, dict]:
    """The parent run's name and the params every versions' parent has."""
    overrides = " ".join(v.sweep.overrides)
    name = f"versions {' '.join(v.given)} · {overrides or 'the default sweep'}"
    return name, {"specs": " | ".join(str(e.spec) for e in built), "overrides": overrides}


def compare_paired(v: Versions, built: list) -> tuple[int, dict]:
    """The environments compared paired on every cell, each against the one before it (the paired sweep along
    runtime.python, `nnbench ab runtime.python=A,B,...`), under the versions' parent run; its exit code (1 with
    --fail-on-regression where a version is slower than the one before it) and its answer."""
    from experiments.compare import along_axis, paired  # the sweep and the store: only once the environments exist
    from experiments.store import tracking
    from experiments.store.parent import ending, parent_run

    s, (name, params) = v.sweep, named(v, built)
    name, out = f"{name} · paired", Path(tempfile.mkdtemp(prefix="nnbench-versions-")) / "sweep"
    pythons = ",".join(f"'{e.python}'" for e in built)
    overrides = (f"runtime.python={pythons}", *s.overrides, "report.along=runtime.python", *v.design.overrides())
    asked = along_axis.Asked(f"nnbench versions {' '.join(v.given)} {' '.join(s.overrides)}", v.markdown,
                             v.design.threshold, v.issue, v.fail_on_regression)
    store = tracking.Store(s.uri)
    with parent_run(store, store.open(s.experiment), name, params | {"paired": "true"}, kind="versions") as run:
        along = along_axis.Along(overrides, out, s.uri, s.experiment, run.run_id, s.quiet)
        code, rows = along_axis.compared(along)
        run.status = ending(interrupted=code in paired.STOPPED, failed=code != OK)
        if code in paired.STOPPED:  # the sweep said so in its one line
            return code, {}
        answer = paired.answer(rows, command="versions", specs=[str(e.spec) for e in built], sweep_dir=str(out),
                               exit=code) | {"parent_run_id": run.run_id}
        reported(rows, asked, name, run)
    along_axis.drafted(rows, out, asked)
    print(f"\nversions: parent run {run.run_id} ({name}); the sweep's dir (every burst): {out}", file=sys.stderr)
    return along_axis.gate(code, rows, asked, "versions"), answer


def reported(rows: list, asked, name: str, run) -> None:
    """The paired verdicts' table on the console, in the Markdown file asked for (`along_axis.Asked`), and as the
    parent run's description, which closes it."""
    from experiments.compare import along_axis, paired  # the sweep's records: only once measured

    text = paired.table(rows)
    print(f"\n{text}", flush=True)
    along_axis.markdown(rows, asked, name)
    with tempfile.TemporaryDirectory() as tmp:
        run.finish(Path(tmp), note=text)


def measure(v: Versions, built: list) -> tuple[int, dict]:
    """The sweep across the environments under the versions' parent run, then each point's history along them; its
    exit code and its answer."""
    from experiments.harness.envs import describe  # packaging and mlflow: only once the environments exist
    from experiments.store import tracking
    from experiments.store.parent import ending, parent_run

    s, (name, params) = v.sweep, named(v, built)
    params |= {"repeats": s.repeats} | {f"env.{i}.{k}": x for i, e in enumerate(built) for k, x in (
        ("spec", str(e.spec)), ("changes", describe(e.manifest.changes)), ("python", str(e.python)))}
    store = tracking.Store(s.uri)
    with parent_run(store, store.open(s.experiment), name, params, kind="versions") as run:
        code = across_envs.across(s, [e.python for e in built], run.run_id)
        run.status = ending(failed=code != OK)
        sweeps = store.search(s.experiment, f"tags.mlflow.parentRunId = '{run.run_id}'")
        print(f"\nversions: parent run {run.run_id} ({name})")
        if len(built) < 2 or sweeps.empty:
            return code, {}
        return code, followed(v, axis_of(built), sweeps["run_id"].iloc[0], name, run)


def axis_of(built) -> str:
    """What the history runs along: the one package whose versions vary, else the whole spec."""
    from experiments.measure.environment import version_key  # packaging: only once the arguments parse

    varying = [i for i, (n, _) in enumerate(built[0].spec.pins) if len({e.spec.pins[i][1] for e in built}) > 1]
    return version_key(built[0].spec.pins[varying[0]][0]) if len(varying) == 1 else "env_spec"


def followed(v: Versions, by: str, sweep_id: str, name: str, run) -> dict:
    """Each point of the sweep `sweep_id` followed along `by`: its history printed and logged as the parent run's
    report, which closes it; the answer (nothing where no point was measured in two environments)."""
    s = v.sweep
    t = history.selected(s.uri, s.experiment, f"tags.mlflow.parentRunId = '{sweep_id}'")
    if t.empty or by not in t or t[by].nunique() < 2:
        print("no point was measured in two environments: nothing to follow along the versions")
        return {}
    h = history.judged(t, by, s.uri, THRESHOLD, ALPHA)
    print(history.report(h, THRESHOLD, ALPHA))
    answer = history.answer(h) | {"parent_run_id": run.run_id}
    history.log(h, name, run)
    print(f"\neach point along {by}: nnbench history --by {by} --sweep {sweep_id} --uri {s.uri}")
    return answer

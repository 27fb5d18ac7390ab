"""Measure a sweep in one environment per version: `nnbench versions jax==0.10.0,0.10.1,0.10.2 model=lenet`.

Each PACKAGE==V1,V2,... lists versions; with several packages the specs are their cross product. Each spec gets a
measuring environment: this one with the spec pinned (jax pins jaxlib at the same version), and what the installer
must move to satisfy it (a flax that supports an older jax), nothing else; built with uv when installed, else pip
(--index-url, --find-links pass through), validated (the versions it imports, a LeNet training step where a framework
moved), and cached per spec and interpreter. A spec that can't be built is one line, before anything is measured.
The sweep's overrides go anywhere on the line (`--` optional).

With two or more specs it compares each adjacent pair of versions paired, as `nnbench ab runtime.python=A,B`
would: on each point, fresh pairs of warm workers, one per environment, alternating short bursts while the other is
stopped, which finds changes of a few percent on a shared machine. It costs about a minute and a half per point and
pair of versions on 2 cores (6 pairs of 75 bursts of 20 ms; more pairs while inconclusive, up to --max-pairs). It
prints each pair of versions' table (ratio newer/older, its interval, the verdict) and logs each comparison under
the versions' parent run; --pairs, --max-pairs, --bursts, --burst-ms, --threshold and --alpha set it.

--unpaired (and one spec) runs the sweep across the environments instead, interleaved (runtime.python varies
fastest; --repeats N adds rounds), under one parent run `versions <specs> · <overrides>` whose params say what each
environment changed; each point's run carries its environment's spec and versions as params and tags. At the end it
prints each point's history along the versions, as `nnbench history` would: Welch's t on processes measured one
after another, seconds per point and version, but blind to changes below tens of percent on a shared machine. It
is the quick look, and the only way for framework=external (its runner times itself: it can't be paired).
--paired (the default) is accepted and changes nothing. --list shows the cached environments, --clean [SPECS]
removes them. See docs/comparing.md.
"""
from __future__ import annotations

import argparse
import functools
import json
import re
import sys
import tempfile
from pathlib import Path

from experiments.cli.environments import (add_environments, add_pairing, answering, build_options, sweep, sweep_jobs,
                                          unpaired)
from experiments.cli.selection import add_design, design_given
from experiments.common.errors import LOST, OK, BadInput
from experiments.measure.verdict import ALPHA, PAIRED_THRESHOLD, THRESHOLD
from experiments.store.uris import store_uri, validate


SPEC = re.compile(r"[=!<>~]=")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("specs", nargs="*", metavar="PACKAGE==V1,V2,... | key=value",
                   help="versions, e.g. jax==0.10.0,0.10.1,0.10.2; and the sweep's overrides, e.g. model=lenet")
    p.set_defaults(overrides=[])  # the sweep's overrides: wherever they are on the line, and after --
    p.epilog = "The sweep's overrides go anywhere on the line (-- is optional): e.g. model=lenet framework=jax"
    p.add_argument("--list", action="store_true", help="list the cached environments")
    p.add_argument("--clean", action="store_true", help="remove the cached environments (of the specs, if given)")
    add_environments(p)
    add_pairing(p, "run the sweep across the environments and judge each point by Welch's t on its processes "
                   "(fast, finds only large changes here; the way for framework=external) instead of comparing "
                   "adjacent versions paired")
    add_design(p)
    p.add_argument("--markdown", type=Path, metavar="FILE", help="paired: also write a short Markdown report of the "
                   "cells that changed (a CI job summary, a PR comment: e.g. $GITHUB_STEP_SUMMARY)")


def run(a: argparse.Namespace) -> int:
    return answering(a, lambda: versions(a))


def versions(a: argparse.Namespace) -> int:
    from experiments.harness import envs  # packaging and the installers: only once the arguments parse

    index, how, cache = build_options(a)
    # a spec is told from an override by its comparison (jax==0.10.0); anything else with = is an override
    a.overrides = [s for s in a.specs if "=" in s and not SPEC.search(s)] + a.overrides
    a.specs = [s for s in a.specs if s not in a.overrides]
    try:
        specs = envs.parse(a.specs) if a.specs or not (a.list or a.clean) else []
    except ValueError as e:
        raise BadInput(str(e)) from None
    if a.list or a.clean:
        return manage(a, specs, cache)
    uri = store_uri(a.uri)
    validate(a.uri, a.experiment, "--uri")
    design = paired_design(a, len(specs))
    environments = functools.cache(lambda: build(specs, index, how, cache))  # built once, by the door or here
    jobs = sweep_jobs(a, uri, environments)
    if design and any(j.config.framework.name == "external" for j in jobs):
        raise BadInput("framework=external can't be paired: its runner times itself, so its bursts can't be "
                       "interleaved with another worker's; add --unpaired")
    if design:
        design.fits(jobs)
    built = environments()
    if design:
        return compare_paired(a, uri, built, design)
    if len(specs) == 1:  # still a measurement (the sweep in that environment), but nothing to follow along
        print(f"nnbench versions: note: one environment ({specs[0]}), nothing to follow along versions: list two "
              "or more versions to compare them", file=sys.stderr)
    return measure(a, uri, built)


def paired_design(a: argparse.Namespace, specs: int):
    """The paired design of the flags, checked before anything is built: None for the unpaired sweep (--unpaired, or
    one spec); BadInput naming the fix for a flag that doesn't fit."""
    from experiments.compare import paired  # only once the arguments parse

    given = design_given(a) + (["--fail-on-regression"] if a.fail_on_regression else [])
    if a.paired and specs < 2:
        raise BadInput("--paired compares adjacent versions: give two or more, e.g. jax==0.10.1,0.10.2")
    if a.unpaired or specs < 2:
        if given:
            fix = "drop --unpaired" if a.unpaired else "give two or more versions, e.g. jax==0.10.1,0.10.2"
            raise BadInput(f"{', '.join(given)} set the paired comparison of adjacent versions: {fix}")
        unpaired(a)
        return None
    if a.repeats != 1:
        raise BadInput("--repeats replicates the unpaired sweep: add --unpaired, or set --pairs N for more pairs")
    return paired.Design(a.pairs, a.max_pairs, a.bursts, a.burst_ms, a.threshold, a.alpha)


def manage(a: argparse.Namespace, specs, cache) -> int:
    from experiments.harness import envs  # packaging: only once the arguments parse

    if a.clean:
        gone = envs.clean(cache, specs or None)
        print(f"removed {len(gone)} environments from {cache}")
        return OK
    found = envs.listed(cache)
    for m in found:
        print(f"{m['spec']}: {envs.describe(m['changes'])} ({m['installer']}, built {m['built']} from "
              f"{m['base_python']}) {m['python']}")
    print(f"{len(found)} environments in {cache}")
    return OK


def build(specs, index, how: str, cache) -> list:
    """Every spec's environment, built or from the cache; BadInput at the first that can't be built."""
    from experiments.harness import envs  # packaging: only once the arguments parse

    base, out = envs.packages(), []
    print(f"environments for {len(specs)} specs: each built once (a minute or more), then cached", flush=True)
    for spec in specs:
        try:
            env = envs.get(spec, index, how, cache, base)
        except envs.BuildError as e:
            raise BadInput(f"{e}: fix the spec, or pass --index-url/--find-links (nothing was measured)") from None
        took = f" in {env.manifest['build_s']:.0f} s" if env.how != "cached" else ""
        print(f"{spec}: {env.how}{took} with {how if env.how != 'cached' else env.manifest['installer']}; "
              f"differs in {envs.describe(env.manifest['changes'])}")
        out.append(env)
    return out


def axis_of(built) -> str:
    """What the history runs along: the one package whose versions vary, else the whole spec."""
    from experiments.measure.environment import version_key  # packaging: only once the arguments parse

    varying = [i for i, (n, _) in enumerate(built[0].spec.pins) if len({e.spec.pins[i][1] for e in built}) > 1]
    return version_key(built[0].spec.pins[varying[0]][0]) if len(varying) == 1 else "env_spec"


def compare_paired(a: argparse.Namespace, uri: str, built, design) -> int:
    """The environments compared paired on every cell, each against the one before it (the paired sweep along
    runtime.python, `nnbench ab runtime.python=A,B,...`), under the versions' parent run; its exit code (1 with
    --fail-on-regression where a version is slower than the one before it)."""
    from experiments.compare import paired  # the sweep and the store: only once the environments exist
    from experiments.store import tracking

    title = f"versions {' '.join(a.specs)} · {' '.join(a.overrides) or 'the default sweep'} · paired"
    params = {"specs": " | ".join(str(e.spec) for e in built), "overrides": " ".join(a.overrides), "paired": "true"}
    store = tracking.Store(uri)
    parent = store.start_parent(store.open(a.experiment), title, params, kind="versions")
    out = Path(tempfile.mkdtemp(prefix="nnbench-versions-")) / "sweep"
    pythons = ",".join(f"'{e.python}'" for e in built)
    overrides = [f"runtime.python={pythons}", *a.overrides, "report.along=runtime.python", *design.overrides()]
    try:
        code = paired.sweep(overrides, out, uri, a.experiment, parent, quiet=a.json)
    except BaseException as e:
        store.set_status(parent, "KILLED" if isinstance(e, KeyboardInterrupt) else "FAILED", quiet=True)
        raise
    if code in paired.STOPPED:  # the sweep said so in its one line
        store.set_status(parent, "KILLED", quiet=True)
        return code
    rows = paired.verdicts(out)
    text = paired.table(rows)
    print(f"\n{text}", flush=True)
    if a.markdown:
        with open(a.markdown, "a") as f:  # a CI job summary collects several reports
            f.write(paired.markdown(rows, title, a.threshold if a.threshold is not None else PAIRED_THRESHOLD))
    if hasattr(a, "answer"):
        a.answer.update(json.loads(paired.as_json(rows, command="versions", specs=[str(e.spec) for e in built],
                                                  sweep_dir=str(out), exit=code)), parent_run_id=parent)
    with tempfile.TemporaryDirectory() as tmp:
        store.finish_parent(parent, Path(tmp), "FINISHED" if code == OK else "FAILED", note=text)
    print(f"\nversions: parent run {parent} ({title}); the sweep's dir (every burst): {out}", file=sys.stderr)
    if code == OK and a.fail_on_regression and (slow := paired.slower(rows)):
        print(f"nnbench versions: error: slower: {'; '.join(slow)}", file=sys.stderr)
        return LOST
    return code


def measure(a: argparse.Namespace, uri: str, built) -> int:
    """The sweep across the environments under the versions' parent run, then each point's history along them."""
    from experiments.cli import history  # pandas and mlflow are slow to import: only once the environments exist
    from experiments.harness.envs import describe
    from experiments.store import tracking

    title = f"versions {' '.join(a.specs)} · {' '.join(a.overrides) or 'the default sweep'}"
    params = {"specs": " | ".join(str(e.spec) for e in built), "overrides": " ".join(a.overrides),
              "repeats": a.repeats}
    params |= {f"env.{i}.{k}": v for i, e in enumerate(built) for k, v in
               (("spec", str(e.spec)), ("changes", describe(e.manifest["changes"])), ("python", str(e.python)))}
    store = tracking.Store(uri)
    parent = store.start_parent(store.open(a.experiment), title, params, kind="versions")
    code = sweep(a, uri, [e.python for e in built], parent)
    status = "FINISHED" if code == OK else "FAILED"
    sweeps = store.search(a.experiment, f"tags.mlflow.parentRunId = '{parent}'")
    print(f"\nversions: parent run {parent} ({title})")
    if len(built) < 2 or sweeps.empty:
        store.set_status(parent, status)
        return code
    by, sweep_id = axis_of(built), sweeps["run_id"].iloc[0]
    t = history.selected(uri, a.experiment, f"tags.mlflow.parentRunId = '{sweep_id}'")
    if t.empty or by not in t or t[by].nunique() < 2:
        print("no point was measured in two environments: nothing to follow along the versions")
        store.set_status(parent, status)
        return code
    s, r, values = history.judged(t, by, uri, THRESHOLD, ALPHA)
    print(history.report(s, r, values, by, THRESHOLD, ALPHA))
    if hasattr(a, "answer"):
        a.answer.update(json.loads(history.as_json(s, r, values, by)), parent_run_id=parent)
    history.log(uri, a.experiment, title, s, r, values, by, None, {}, parent=parent, status=status)
    print(f"\neach point along {by}: nnbench history --by {by} --sweep {sweep_id} --uri {uri}")
    return code

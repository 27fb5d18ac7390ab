"""Measure a sweep in one environment per version: `nnbench versions jax==0.10.0,0.10.1,0.10.2 model=lenet`.

Each PACKAGE==V1,V2,... lists versions; with several packages the specs are their cross product. Each spec gets a
measuring environment: this one with the spec pinned (jax pins jaxlib at the same version), and what the installer
must move to satisfy it (a flax that supports an older jax), nothing else; built with uv when installed, else pip
(--index-url, --find-links pass through), validated (the versions it imports, a LeNet training step where a framework
moved), and cached per spec and interpreter. A spec that can't be built is one line, before anything is measured.
The sweep's overrides go anywhere on the line (`--` optional).

With two or more specs it compares each adjacent pair of versions paired, as `nnbench ab runtime.python=A,B`
would: on each point, fresh pairs of warm workers, one per environment, alternating short bursts while the other is
stopped, which finds changes of a few percent on a shared machine. Each cell takes the bench preset's design (the
default: 5 pairs of 25 bursts of 20 ms, more pairs while inconclusive, up to --max-pairs: 12); the README sweep's cells took
about 12 s each on 2 cores (docs/evidence.md). It
prints each pair of versions' table (ratio newer/older, its interval, the verdict) and logs each comparison under
the versions' parent run; --pairs, --max-pairs, --bursts, --burst-ms, --threshold and --alpha set it. --issue DIR
writes, for each cell judged slower, an upstream report draft and a script that shows it with the framework alone.

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
import re
from pathlib import Path

from experiments.cli.selection import (add_design, add_environments, add_issue, add_pairing, answering,
                                       design_flags, design_given)
from experiments.common.errors import BadInput
from experiments.common.options import writable
from experiments.compare import across_envs, versions
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
    p.add_argument("--markdown", type=writable("--markdown", directory=False), metavar="FILE",
                   help="paired: also write a short Markdown report of the cells that changed (a CI job summary, a PR "
                        "comment: e.g. $GITHUB_STEP_SUMMARY)")
    add_issue(p)


def run(a: argparse.Namespace) -> int:
    return answering(a.json, lambda: measured(a))


def measured(a: argparse.Namespace) -> tuple[int, dict]:
    """The command line read into what compare.versions is asked; its exit code and answer."""
    sources = across_envs.sources(a.index_url, a.find_links, a.extra_index_url, a.installer, a.cache)
    # a spec is told from an override by its comparison (jax==0.10.0); anything else with = is an override
    overrides = [s for s in a.specs if "=" in s and not SPEC.search(s)] + a.overrides
    given = [s for s in a.specs if s not in overrides]
    specs = across_envs.specs(given) if given or not (a.list or a.clean) else []
    if a.list or a.clean:
        return across_envs.manage(sources.cache, specs, a.clean), {}
    uri = store_uri(a.uri)
    validate(a.uri, a.experiment, "--uri")
    design = design_of(a, len(specs))
    sweep = across_envs.Sweep("versions", tuple(overrides if design else across_envs.unpaired(overrides)), uri,
                               a.experiment, a.repeats, a.json)
    return versions.compare(versions.Versions(tuple(given), tuple(specs), sweep, sources, design=design,
                                              markdown=a.markdown, fail_on_regression=a.fail_on_regression,
                                              issue=a.issue))


def design_of(a: argparse.Namespace, specs: int):
    """The paired design of the flags, checked before anything is built: None for the unpaired sweep (--unpaired, or
    one spec); BadInput naming the fix for a flag that doesn't fit."""
    given = design_given(a) + (["--fail-on-regression"] if a.fail_on_regression else []) + (["--issue"] if a.issue
                                                                                             else [])
    if a.paired and specs < 2:
        raise BadInput("--paired compares adjacent versions: give two or more, e.g. jax==0.10.1,0.10.2")
    fix = None  # the paired comparison: no fix needed
    if a.unpaired or specs < 2:
        fix = "drop --unpaired" if a.unpaired else "give two or more versions, e.g. jax==0.10.1,0.10.2"
    return across_envs.paired_design(design_flags(a), given, fix, a.repeats,
                                      "the paired comparison of adjacent versions")

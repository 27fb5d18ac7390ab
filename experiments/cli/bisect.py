"""Find the release at which a point changed:
`nnbench bisect jax 0.10.0..0.10.2 model=lenet ops=[training] batch_size=128`.

Lists the package's released versions in the range A..B (both included) from the package index (pip's view: its
configuration, --index-url and --find-links apply; --pre adds pre-releases and nightlies), builds each probed version's
environment (as `nnbench versions` builds them) and halves the range: a version at the start's level moves the
range's start up to it, a changed one moves its end down. It probes about log2(n) versions; a version that can't be
installed is skipped and said. The overrides must make one point: one model, one op, one batch size.

Each step is judged paired, as `nnbench ab runtime.python=START,PROBE` would: fresh pairs of warm workers, one in the
start's environment and one in the probe's, alternating short bursts while the other is stopped (the bench preset's
design: 5 pairs of 25 bursts of 20 ms by default, up to 12; --pairs, --max-pairs, --bursts, --burst-ms). Every step compares the probe with
the start, not with its nearest known neighbour: each verdict then answers the one question a bisection needs (is
this version still at the start's level?), while chained neighbour verdicts of "no change within ±3%" could drift
step by step beyond the threshold unseen; and the start's workers run beside every probe's, so no verdict compares
measurements taken apart in time. "slower" or "faster" beyond --threshold (3%) moves the end, "no change" (the
interval inside ±3%) the start; an inconclusive step gets more pairs, up to --max-pairs, and if still inconclusive
the bisect says so in one line (the versions and where the change lies) instead of guessing, and exits 1. The first
changed version is then compared with its neighbour, paired, for the evidence: its ratio, interval and pairs. Each
step is an `ab` run (with a child run per point, every burst kept) under one parent run
`bisect <package> A..B · <model> <op> bs<batch>`, tagged `first_changed`. Both sides of each changed step are
profiled, and the first change's says where the time went, per category and top op (--no-profile: not); --issue DIR
writes an upstream report draft for it where it is slower, as `versions --issue` does. --paired is the default,
accepted.

--unpaired measures each probed version's sweep instead and judges it by Welch's t on per-process medians against
the last version at the start's level (--threshold 5%): fast, and it reuses runs already in the store for the same
point and environment (fingerprint), but blind to changes below tens of percent on a shared machine; it is the way
for framework=external, whose runner times itself and can't be paired. Its evidence is both neighbours' medians and
intervals, and a trend plot that marks the change. Where several changes lie in the range either names the first
one away from the start's level (`nnbench versions` over the range shows each step). See docs/comparing.md.
"""
from __future__ import annotations

import argparse

from experiments.cli.selection import (add_design, add_environments, add_issue, add_pairing, answering,
                                       design_flags, design_given)
from experiments.common.options import probability, threshold
from experiments.compare import across_envs
from experiments.compare.bisection import Bisection, bisect
from experiments.stats.verdicts import ALPHA, PAIRED_THRESHOLD, THRESHOLD
from experiments.store.uris import store_uri


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("package", help="e.g. jax, torch, flax")
    p.add_argument("range", metavar="A..B", help="versions from A to B, both included, e.g. 0.10.0..0.10.2")
    p.add_argument("overrides", nargs="*", help="the sweep's overrides, for one point: e.g. model=lenet "
                                                "ops=[training] batch_size=128")
    p.add_argument("--threshold", type=threshold, default=None,
                   help=f"smallest change that counts: a fraction or a percentage (default {PAIRED_THRESHOLD * 100:g}%% "
                        f"paired, {THRESHOLD * 100:g}%% with --unpaired)")
    p.add_argument("--alpha", type=probability("--alpha"), default=ALPHA,
                   help="significance level of each comparison (default %(default)s)")
    p.add_argument("--pre", action="store_true", help="include pre-releases and nightlies (.dev) in the range")
    add_pairing(p, "judge each probed version's sweep by Welch's t on per-process medians instead (fast, reuses "
                   "stored runs, finds only large changes here; the way for framework=external)")
    add_design(p, verdict=False)
    p.add_argument("--fail-on-regression", action="store_true",
                   help="exit 1, naming it, where the first changed version is slower")
    add_issue(p)
    add_environments(p)


def run(a: argparse.Namespace) -> int:
    return answering(a.json, lambda: bisect(asked(a)))


def asked(a: argparse.Namespace) -> Bisection:
    """The command line read into what compare.bisection is asked; BadInput naming the fix for a flag that doesn't
    fit, before anything is listed or built."""
    sources = across_envs.sources(a.index_url, a.find_links, a.extra_index_url, a.installer, a.cache)
    t = a.threshold if a.threshold is not None else THRESHOLD if a.unpaired else PAIRED_THRESHOLD
    design = across_envs.paired_design(design_flags(a) | {"threshold": t, "profile": a.profile is not False},
                                        design_given(a) + (["--issue"] if a.issue else []),
                                        "drop --unpaired" if a.unpaired else None, a.repeats)
    overrides = across_envs.unpaired(a.overrides) if design is None else a.overrides
    sweep = across_envs.Sweep("bisect", tuple(overrides), store_uri(a.uri), a.experiment, a.repeats, a.json)
    return Bisection(a.package, a.range, sweep, sources, threshold=t, alpha=a.alpha, design=design, pre=a.pre,
                     fail_on_regression=a.fail_on_regression, issue=a.issue)

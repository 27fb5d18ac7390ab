"""Find the release at which a point changed:
`nnbench bisect jax 0.10.0..0.10.2 model=lenet ops=[training] batch_size=128`.

Lists the package's released versions in the range A..B (both included) from the package index (pip's view: its
configuration, --index-url and --find-links apply; --pre adds pre-releases and nightlies), builds each probed version's
environment (as `nnbench versions` builds them) and halves the range: a version at the start's level moves the
range's start up to it, a changed one moves its end down. It probes about log2(n) versions; a version that can't be
installed is skipped and said. The overrides must make one point: one model, one op, one batch size.

Each step is judged paired, as `nnbench ab runtime.python=START,PROBE` would: fresh pairs of warm workers, one in the
start's environment and one in the probe's, alternating short bursts while the other is stopped (about a minute and a
half per step on 2 cores; --pairs, --max-pairs, --bursts, --burst-ms). Every step compares the probe with
the start, not with its nearest known neighbour: each verdict then answers the one question a bisection needs (is
this version still at the start's level?), while chained neighbour verdicts of "no change within ±3%" could drift
step by step beyond the threshold unseen; and the start's workers run beside every probe's, so no verdict compares
measurements taken apart in time. "slower" or "faster" beyond --threshold (3%) moves the end, "no change" (the
interval inside ±3%) the start; an inconclusive step gets more pairs, up to --max-pairs, and if still inconclusive
the bisect says so in one line (the versions and where the change lies) instead of guessing, and exits 1. The first
changed version is then compared with its neighbour, paired, for the evidence: its ratio, interval and pairs. Each
step is an `ab` run (with a child run per point, every burst kept) under one parent run
`bisect <package> A..B · <model> <op> bs<batch>`, tagged `first_changed`. --paired is the default, accepted.

--unpaired measures each probed version's sweep instead and judges it by Welch's t on per-process medians against
the last version at the start's level (--threshold 5%): fast, and it reuses runs already in the store for the same
point and environment (fingerprint), but blind to changes below tens of percent on a shared machine; it is the way
for framework=external, whose runner times itself and can't be paired. Its evidence is both neighbours' medians and
intervals, and a trend plot that marks the change. Where several changes lie in the range either names the first
one away from the start's level (`nnbench versions` over the range shows each step). See docs/comparing.md.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import tempfile
from pathlib import Path

from experiments.cli.environments import (add_environments, add_pairing, answering, build_options, sweep, sweep_jobs,
                                          unpaired)
from experiments.cli.selection import add_design, design_given
from experiments.common.errors import INTERRUPTED, LOST, OK, BadInput
from experiments.common.options import probability, threshold
from experiments.measure.verdict import ALPHA, PAIRED_THRESHOLD, THRESHOLD, Verdict, judge
from experiments.store.uris import store_uri, validate


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
    add_environments(p)


@dataclasses.dataclass
class Level:
    """One version as measured: its runs of the point (report.tables.tidy rows) and each run's per-process samples."""

    rows: object  # a pandas DataFrame
    samples: dict[str, list[list[float]]]  # run id -> one list of per-call samples per measuring process
    reused: bool = False

    @property
    def processes(self) -> list[list[float]]:
        return [p for procs in self.samples.values() for p in procs]

    @property
    def medians(self) -> list[float]:
        import numpy as np  # numpy: only once something is measured

        return [float(np.median(p)) for p in self.processes]


def run(a: argparse.Namespace) -> int:
    return answering(a, lambda: bisect(a))


def bisect(a: argparse.Namespace) -> int:
    from packaging.version import InvalidVersion, Version  # packaging: only once the arguments parse
    from experiments.harness import envs

    index, how, cache = build_options(a)
    design = paired_design(a)
    try:
        envs.in_range([], a.range)  # the range's form first: "is not A..B", "runs backwards"
        pre = a.pre or any(Version(b).is_prerelease for b in a.range.split("..") if b)
        listed = envs.released(a.package, index, pre)
        versions = envs.in_range(listed, a.range, pre)
    except (ValueError, InvalidVersion) as e:
        raise BadInput(f"{e}") from None
    except LookupError as e:
        raise BadInput(f"cannot list the versions of {a.package}: {e}: fix the name, or pass --index-url") from None
    if len(versions) < 2:
        raise BadInput(f"{a.package} has {len(versions)} released version(s) in {a.range} "
                       f"({', '.join(versions) or 'none'}; the index has {', '.join(listed[-8:]) or 'none'}): "
                       "widen the range")
    uri = store_uri(a.uri)
    validate(a.uri, a.experiment, "--uri")
    jobs = sweep_jobs(a, uri, lambda: [start_env(a, versions[0], index, how, cache)])
    if len(jobs) != 1 or len(jobs[0].points) != 1 or len(jobs[0].points[0].ops) != 1:
        n = sum(len(p.ops) for j in jobs for p in j.points)
        raise BadInput(f"the overrides make {n} measured ops; bisect follows one: give one model, one op and one "
                       "batch size, e.g. model=lenet ops=[training] batch_size=128")
    if design is None and jobs[0].config.bench.processes * a.repeats < 2:
        raise BadInput("bisect --unpaired judges versions by their processes, and this sweep measures one per "
                       "version: use bench=default (5 processes), or bench.processes=5, or --repeats 5")
    if design is None:
        return Bisect(a, uri, jobs[0], versions, index, how, cache).run()
    if jobs[0].config.framework.name == "external":
        raise BadInput("framework=external can't be paired: its runner times itself, so its bursts can't be "
                       "interleaved with another worker's; add --unpaired")
    design.fits(jobs)
    return Paired(a, uri, jobs[0], versions, index, how, cache, design).run()


def start_env(a: argparse.Namespace, version: str, index, how: str, cache):
    """The range's first version's environment (built, or from the cache), for a network only it declares."""
    from experiments.harness import envs  # packaging: only once the arguments parse

    try:
        return envs.get(envs.Spec(((a.package, version),)), index, how, cache, envs.packages())
    except envs.BuildError as e:
        raise BadInput(f"{e}: the range's first version is needed to check model=; fix the range, or pass "
                       "--index-url/--find-links (nothing was measured)") from None


def paired_design(a: argparse.Namespace):
    """The paired design of the flags (None with --unpaired), and the threshold's default for the search chosen;
    BadInput naming the fix for a flag that doesn't fit, before anything is listed or built."""
    from experiments.compare import paired  # only once the arguments parse

    given = design_given(a)
    if a.unpaired:
        if given:
            raise BadInput(f"{', '.join(given)} set the paired comparison: drop --unpaired")
        a.threshold = THRESHOLD if a.threshold is None else a.threshold
        unpaired(a)
        return None
    if a.repeats != 1:
        raise BadInput("--repeats replicates the unpaired sweep: add --unpaired, or set --pairs N for more pairs")
    a.threshold = PAIRED_THRESHOLD if a.threshold is None else a.threshold
    return paired.Design(a.pairs, a.max_pairs, a.bursts, a.burst_ms, a.threshold, a.alpha)


class Interrupted(Exception):
    """A Ctrl-C inside a step's paired comparison (ab has said so and closed its own run)."""


class Bisect:
    """The bisection judged unpaired (--unpaired): each probed version's sweep, Welch's t on process medians."""

    def __init__(self, a, uri, job, versions, index, how, cache):
        from experiments.harness import envs  # packaging and mlflow: only once the arguments are validated
        from experiments.store import tracking

        self.a, self.uri, self.job, self.versions = a, uri, job, versions
        self.index, self.how, self.cache, self.base = index, how, cache, envs.packages()
        self.point, self.op = job.points[0], job.points[0].ops[0]
        self.envs: dict[str, object] = {}  # version -> its Env, or the reason it can't be built
        self.fingerprints: dict[str, str | None] = {}  # version -> its environment's fingerprint, probed once
        self.levels: dict[str, Level] = {}
        self.skipped: dict[str, str] = {}
        self.exp_id = tracking.Store(uri).open(a.experiment)
        self.title = (f"bisect {a.package} {a.range} · {job.config.model['name']} {self.op} bs{self.point.batch_size}"
                      + (f" · {job.variant}" if job.variant != "jax-jit fp32" else ""))

    def say(self, line: str) -> None:
        print(f"bisect: {line}", flush=True)

    def env(self, v: str):
        """The version's environment, or None (skipped: said once)."""
        from experiments.harness import envs  # packaging: only once the arguments are validated

        if v not in self.envs:
            try:
                e = envs.get(envs.Spec(((self.a.package, v),)), self.index, self.how, self.cache, self.base)
                changes = envs.describe(e.manifest["changes"])
                self.say(f"{self.a.package} {v}: environment {e.how}; differs in {changes}")
                self.envs[v] = e
            except envs.BuildError as e:
                self.envs[v] = None
                self.skipped[v] = str(e)
                self.say(f"skip {v}: {e}")
        return self.envs[v]

    def stored(self, v: str) -> Level | None:
        """The version's FINISHED runs of this point in this environment, from the store."""
        import pandas as pd  # pandas, mlflow and the worker's probe: only once measuring
        from experiments.harness import manager
        from experiments.report import tables
        from experiments.store import records, tracking

        python, c = str(self.envs[v].python), self.job.config
        if v not in self.fingerprints:  # a runner's fingerprint comes from what it prints: none to probe
            self.fingerprints[v] = None if c.framework.name == "external" else manager.probe(
                [(python, str(c.framework.name), self.job.setup, str(c.runtime.allocator))])[0][1]
        fingerprint = self.fingerprints[v]
        rows, samples = [], {}
        for r in range(self.a.repeats):
            config = dataclasses.replace(c, runtime=dataclasses.replace(c.runtime, python=python), repeat=r)
            key = records.point_key(dataclasses.replace(self.job, config=config), self.point)
            found = tables.tidy(tracking.Store(self.uri).search(
                self.a.experiment, f"attributes.status = 'FINISHED' and tags.point_key = '{key}'"))
            if found.empty:
                continue
            found = found[found["op"] == self.op]
            if fingerprint:
                found = found[found["env_fingerprint"] == fingerprint]
            for run_id in found["run_id"]:
                entry = tracking.Store(self.uri).load_samples(run_id)[self.op]
                samples[run_id] = [p["samples_s"] for p in entry.get("processes", [entry])]
            rows.append(found)
        return Level(pd.concat(rows), samples) if samples else None

    def measure(self, versions: list[str]) -> None:
        """Each version's level: from the store, else measured now (one sweep for those missing, interleaved)."""
        todo = []
        for v in versions:
            if v in self.levels or self.env(v) is None:
                continue
            if level := self.stored(v):
                self.levels[v] = dataclasses.replace(level, reused=True)
                self.say(f"{v}: {len(level.processes)} processes already in the store "
                         f"(runs {', '.join(level.samples)})")
            else:
                todo.append(v)
        if not todo:
            return
        self.say(f"measuring {', '.join(todo)}")
        sweep(self.a, self.uri, [self.envs[v].python for v in todo], self.parent)
        for v in todo:
            if level := self.stored(v):
                self.levels[v] = level
            else:
                self.skipped[v] = "measured nothing (the sweep's output above says why)"
                self.say(f"skip {v}: {self.skipped[v]}")

    def verdict(self, old: str, new: str):
        return judge([(self.levels[old].medians, self.levels[new].medians)], self.a.threshold, self.a.alpha)[0]

    def end(self, lo: int, step: int) -> int | None:
        """The first version from index `lo` on (step +1) or back (step -1) that can be measured."""
        i = lo
        while 0 <= i < len(self.versions):
            self.measure([self.versions[i]])
            if self.versions[i] in self.levels:
                return i
            i += step
        return None

    def run(self) -> int:
        from experiments.store import tracking  # mlflow is slow to import: only once the arguments are validated

        a, vs = self.a, self.versions
        self.say(f"{len(vs)} versions of {a.package} in {a.range}: {', '.join(vs)}")
        self.parent = tracking.Store(self.uri).start_parent(self.exp_id, self.title, self.params(), kind="bisect")
        try:
            found, note = self.search()
        except Interrupted:
            tracking.Store(self.uri).set_status(self.parent, "KILLED")
            return INTERRUPTED
        except BaseException as e:
            tracking.Store(self.uri).set_status(self.parent, "KILLED" if isinstance(e, KeyboardInterrupt) else "FAILED")
            raise
        code = self.report(found, note)
        answer = self.answer(found, note)
        if hasattr(a, "answer"):  # --json
            a.answer.update(answer)
        if code == OK and a.fail_on_regression and answer.get("verdict") == "slower":
            print(f"nnbench bisect: error: slower from {a.package} {answer['first_changed']} on (its parent run "
                  f"{self.parent})", file=sys.stderr)
            return LOST
        return code

    def params(self) -> dict:
        a = self.a
        return {"package": a.package, "range": a.range, "versions": " ".join(self.versions),
                "overrides": " ".join(a.overrides), "threshold": a.threshold, "alpha": a.alpha, "repeats": a.repeats}

    def search(self):
        """(lo, hi, verdict) of the first change, or None; and what to say about it."""
        vs = self.versions
        self.measure([vs[0], vs[-1]])
        lo = 0 if vs[0] in self.levels else self.end(1, +1)
        hi = len(vs) - 1 if vs[-1] in self.levels else self.end(len(vs) - 2, -1)
        if lo is None or hi is None or hi <= lo:
            return None, "fewer than two versions in the range could be measured"
        ends = self.verdict(vs[lo], vs[hi])
        self.say(f"{vs[lo]} → {vs[hi]}: {ends.verdict} (×{ends.ratio:.3f} [{ends.ci_low:.3f}, {ends.ci_high:.3f}], "
                 f"p {ends.p_value:.2g})")
        if not ends.verdict.changed:
            return None, f"the ends {vs[lo]} and {vs[hi]} don't differ ({ends.verdict}): nothing to bisect"
        while hi - lo > 1:
            mid = next((i for i in sorted(range(lo + 1, hi), key=lambda i: abs(i - (lo + hi) // 2))
                        if vs[i] not in self.skipped), None)
            if mid is None:
                between = ", ".join(vs[lo + 1:hi])
                return (lo, hi, self.verdict(vs[lo], vs[hi])), f"{between} could not be measured: the change is " \
                    f"in {between} or {vs[hi]}"
            self.measure([vs[mid]])
            if vs[mid] not in self.levels:
                continue
            v = self.verdict(vs[lo], vs[mid])
            self.say(f"{vs[lo]} → {vs[mid]}: {v.verdict} (×{v.ratio:.3f} [{v.ci_low:.3f}, {v.ci_high:.3f}], "
                     f"p {v.p_value:.2g})")
            lo, hi = (lo, mid) if v.verdict.changed else (mid, hi)
        last = self.verdict(vs[lo], vs[hi])
        note = "" if last.verdict != Verdict.SAME else (
            f"the step {vs[lo]} → {vs[hi]} alone is below the verdict's reach: the change may be spread over several "
            "versions (nnbench versions and history show them all)")
        return (lo, hi, last), note

    def answer(self, found, note: str) -> dict:
        """What --json prints: the first changed version and its evidence."""
        vs = self.versions
        out = {"package": self.a.package, "range": self.a.range, "versions": vs,
               "measured": [v for v in vs if v in self.levels],
               "skipped": self.skipped, "first_changed": vs[found[1]] if found else None, "note": note,
               "parent_run_id": self.parent, "verdict": str(found[2].verdict) if found else str(Verdict.SAME)}
        if found:
            lo, _, v = found
            out |= {"before": vs[lo], "ratio": v.ratio, "ci95": [v.ci_low, v.ci_high], "p_value": v.p_value}
        return out

    def report(self, found, note: str) -> int:
        """The evidence on the console and in the parent run (report, CSVs, trend plot with the change marked)."""
        import pandas as pd  # pandas and matplotlib are slow to import: only at the end
        from experiments.cli.history import log
        from experiments.measure.stats import median_of_medians, rerun_interval
        from experiments.report import history
        from experiments.report.tables import POINT
        from experiments.store import tracking

        vs, by = self.versions, f"{self.a.package} version"
        measured = [v for v in vs if v in self.levels]
        lines = []
        for v in measured:
            lv = self.levels[v]
            lo, hi = rerun_interval(lv.processes) if len(lv.processes) > 1 else (float("nan"),) * 2
            lines.append(f"  {v}: {median_of_medians(lv.processes) * 1e3:.4g} ms [{lo * 1e3:.4g}, {hi * 1e3:.4g}] "
                         f"({len(lv.processes)} processes{', from the store' if lv.reused else ''})")
        if found:
            lo, hi, v = found
            head = (f"first changed at {self.a.package} {vs[hi]} ({vs[lo]} → {vs[hi]}): {v.verdict}, ×{v.ratio:.3f} "
                    f"[{v.ci_low:.3f}, {v.ci_high:.3f}], p {v.p_value:.2g}")
        else:
            head = f"no change found: {note}"
        fresh = [v for v in measured if not self.levels[v].reused]
        tail = (f"measured {len(fresh)} of {len(vs)} versions ({', '.join(fresh) or 'none'}); from the store: "
                f"{', '.join(v for v in measured if self.levels[v].reused) or 'none'}; skipped: "
                f"{', '.join(self.skipped) or 'none'}")
        text = "\n".join([head, "(median per call and the interval a re-run lands in)", *lines,
                          *([f"note: {note}"] if note and found else []), tail])
        print(f"\n{self.title}\n{text}")
        t = pd.concat([self.levels[v].rows.assign(**{by: v}) for v in measured], ignore_index=True)
        medians = {run_id: m for v in measured for run_id, procs in self.levels[v].samples.items()
                   for m in [[float(pd.Series(p).median()) for p in procs]]}
        s = history.series(t, by, lambda run_id, op: medians[run_id])
        r = history.regressions(s.iloc[:0])
        if found:
            lo, hi, v = found
            row = s[s["value"] == vs[hi]].iloc[0]
            r = pd.DataFrame([{k: row[k] for k in POINT} | {
                "where": vs[hi], "before": vs[lo], "after": vs[hi],
                "before_median_s": float(pd.Series(self.levels[vs[lo]].medians).median()),
                "after_median_s": float(pd.Series(self.levels[vs[hi]].medians).median()), "ratio": v.ratio,
                "ci95_low": v.ci_low, "ci95_high": v.ci_high, "p_value": v.p_value, "q_value": v.q_value,
                "verdict": v.verdict, "processes_before": v.processes_old, "processes_after": v.processes_new}])
        tracking.Store(self.uri).set_tags(self.parent, {
            "first_changed": vs[found[1]] if found else "none", "verdict": found[2].verdict if found else Verdict.SAME,
            "measured": " ".join(measured), "skipped": " ".join(self.skipped)})
        log(self.uri, self.a.experiment, self.title, s, r, measured, by, None, {}, parent=self.parent, note=text)
        print(f"parent run {self.parent} in {self.uri}")
        return OK


class Paired(Bisect):
    """The bisection judged paired (the default): each step an `ab` comparison of the start's environment against the
    probe's on the one point, nested under the bisect's parent run."""

    def __init__(self, a, uri, job, versions, index, how, cache, design):
        super().__init__(a, uri, job, versions, index, how, cache)
        self.design = design
        self.steps: list[dict] = []  # ab's rows (B/A: the newer over the older), in the order compared
        self.unsettled = False  # a step stayed inconclusive at --max-pairs: the bisect stopped there
        self.out = Path(tempfile.mkdtemp(prefix="nnbench-bisect-"))

    def params(self) -> dict:
        return super().params() | {"paired": "true", "design": " ".join(self.design.overrides()) or "the preset's"}

    def label(self, v: str) -> str:
        return f"{self.a.package}=={v}"

    def compared(self, old: str, new: str) -> dict | None:
        """ab's row of `new` against `old` on the point, compared now or earlier in this bisect; None where the op
        can't run in one of them (`new` skipped, and said)."""
        sides = [self.label(old), self.label(new)]
        row = next((r for r in self.steps if [r["a"], r["b"]] == sides), None)
        if row is None:
            from experiments.compare import paired  # the sweep and its records: only once measuring

            out = self.out / f"{old}-{new}"
            pythons = ",".join(f"'{self.envs[v].python}'" for v in (old, new))
            code = paired.sweep([f"runtime.python={pythons}", *self.a.overrides, "report.along=runtime.python",
                                 *self.design.overrides()], out, self.uri, self.a.experiment, self.parent,
                                quiet=self.a.json)
            if code in paired.STOPPED:  # the sweep was interrupted (it said so, and closed its runs)
                raise Interrupted()
            row = step_row(sides, paired.verdicts(out), out)
            self.steps.append(row)
            self.say(f"{new} against {old}: {step(row)}")
        if row["skipped"]:
            self.skipped[new] = f"the op can't run: {row['skipped']}"
        return None if row["skipped"] else row

    def level(self, start: int, i: int) -> tuple[Verdict, dict] | None:
        """The version at `i` against the start, paired: the verdict and ab's row; None where it is skipped."""
        vs = self.versions
        if self.env(vs[i]) is None or (row := self.compared(vs[start], vs[i])) is None:
            return None
        return Verdict(row["verdict"]), row

    def search(self):
        """(lo, hi, the neighbours' row) of the first change, or None; and what to say about it."""
        vs = self.versions
        start = next((i for i, v in enumerate(vs) if self.env(v) is not None), None)
        hi, judged = len(vs) - 1, None
        while start is not None and hi > start and (judged := self.level(start, hi)) is None:
            hi -= 1
        if judged is None:
            return None, "fewer than two versions in the range could be measured"
        v, row = judged
        if v == Verdict.SAME:
            return None, f"the ends {vs[start]} and {vs[hi]} don't differ ({step(row)})"
        if not v.changed:
            return None, self.stopped(row, start, hi, f"the ends {vs[start]} → {vs[hi]}")
        lo = start
        while hi - lo > 1:
            mid = next((i for i in sorted(range(lo + 1, hi), key=lambda i: abs(i - (lo + hi) // 2))
                        if vs[i] not in self.skipped), None)
            if mid is None:
                between = ", ".join(vs[lo + 1:hi])
                return (lo, hi, self.compared(vs[lo], vs[hi])), (f"{between} could not be measured: the change is "
                                                                 f"in {between} or {vs[hi]}")
            if (judged := self.level(start, mid)) is None:
                continue
            v, row = judged
            if not (v.changed or v == Verdict.SAME):
                return None, self.stopped(row, lo, hi, f"{vs[mid]} against the start {vs[start]}")
            lo, hi = (lo, mid) if v.changed else (mid, hi)
        return (lo, hi, self.compared(vs[lo], vs[hi])), ""

    def stopped(self, row: dict, lo: int, hi: int, what: str) -> str:
        """The one line of a step that stayed inconclusive: the versions, where the change lies, what to do."""
        self.unsettled = True
        vs, t, most = self.versions, self.a.threshold, self.design.max_pairs or "the bench preset's"
        return (f"inconclusive: {what}: {step(row)}, neither beyond nor within ±{t:.0%}; the first change, if any, "
                f"lies after {vs[lo]} and at or before {vs[hi]} ({vs[lo]}..{vs[hi]}): not guessing; raise "
                f"--max-pairs (now {most}) or --threshold, or run it on a quieter machine")

    def answer(self, found, note: str) -> dict:
        """What --json prints: the first changed version, its neighbour's paired evidence, and every step."""
        vs = self.versions
        out = {"package": self.a.package, "range": self.a.range, "versions": vs, "paired": True,
               "measured": [v for v in vs if any(self.label(v) in (r["a"], r["b"]) for r in self.steps)],
               "skipped": self.skipped, "first_changed": vs[found[1]] if found else None, "note": note,
               "inconclusive": self.unsettled, "parent_run_id": self.parent, "steps": self.steps}
        if found:
            lo, _, row = found
            out |= {"before": vs[lo], "ratio": row["ratio"], "ci95": row["interval"], "pairs": row["pairs"],
                    "verdict": row["verdict"]}
        else:
            out["verdict"] = str(Verdict.INCONCLUSIVE if self.unsettled else Verdict.SAME)
        return out

    def report(self, found, note: str) -> int:
        """The evidence on the console and in the parent run (its description, bisect.json); 1 where a step stayed
        inconclusive."""
        from experiments.store import tracking  # mlflow is slow to import: only at the end

        vs, answer = self.versions, self.answer(found, note)
        if found:
            lo, hi, row = found
            head = f"first changed at {self.a.package} {vs[hi]} ({vs[lo]} → {vs[hi]}): {step(row)}"
            if row["verdict"] not in (Verdict.SLOWER, Verdict.FASTER):  # changed from the start, not in one step
                note = note or (f"the step {vs[lo]} → {vs[hi]} alone reads {row['verdict']}: the change from "
                                f"{vs[0]} may be spread over several versions (nnbench versions shows each step)")
        else:
            head = note if self.unsettled else f"no change found: {note}"
        n = len(self.steps)
        tail = (f"{n} paired comparison{'s' * (n != 1)}, measuring {len(answer['measured'])} of "
                f"{len(vs)} versions ({', '.join(answer['measured']) or 'none'}); skipped: "
                f"{', '.join(self.skipped) or 'none'}")
        lines = [f"  {r['b'].split('==')[-1]} against {r['a'].split('==')[-1]}: {step(r)}" for r in self.steps]
        text = "\n".join([head, "(paired, each step newer over older: the ratio, its 95% interval, the verdict)", *lines,
                          *([f"note: {note}"] if note and found else []), tail])
        print(f"\n{self.title}\n{text}")
        tags = {"first_changed": answer["first_changed"] or "none", "verdict": answer["verdict"], "paired": "true",
                "measured": " ".join(answer["measured"]), "skipped": " ".join(self.skipped)}
        with tempfile.TemporaryDirectory() as tmp:
            Path(tmp, "bisect.json").write_text(json.dumps(answer, indent=1, default=str))
            tracking.Store(self.uri).finish_parent(self.parent, Path(tmp), note=text, tags=tags)
        print(f"parent run {self.parent} in {self.uri}")
        return LOST if self.unsettled else OK


def step_row(sides: list[str], rows: list, out: Path) -> dict:
    """A step's row (what --json lists): the one cell's paired verdict, or why there is none (the op can't run in an
    environment, or the sweep failed: its dir says why)."""
    if not rows:
        return {"a": sides[0], "b": sides[1], "ratio": None, "interval": [None, None], "verdict": "no verdict",
                "pairs": 0, "skipped": f"no paired verdict: the sweep's records in {out} say why"}
    (r,) = rows
    return {"a": sides[0], "b": sides[1], "ratio": r.ratio, "interval": list(r.interval()), "verdict": str(r.verdict),
            "pairs": r.trials, "skipped": None, "run_id": r.run_id}


def step(row: dict) -> str:
    """One paired comparison in words: ×ratio [interval], verdict, pairs."""
    lo, hi = row["interval"]
    interval = f" [{lo:.3f}, {hi:.3f}]" if lo is not None and hi is not None else ""
    ratio = f"×{row['ratio']:.3f}" if row["ratio"] is not None and math.isfinite(row["ratio"]) else "no ratio"
    return f"{ratio}{interval}, {row['skipped'] and 'skipped: ' + row['skipped'] or row['verdict']}, {row['pairs']} pairs"

"""A bisect's steps judged unpaired (--unpaired): each probed version's sweep (or its runs already in the store for
the same point and environment), judged by Welch's t on per-process medians against the last version at the start's
level; the evidence is both neighbours' medians and intervals and a trend plot with the change marked. The search
itself is compare.bisection's."""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from experiments.common.config import EXTERNAL
from experiments.common.errors import OK
from experiments.compare import across_envs
from experiments.stats.unpaired import Comparison, judge
from experiments.stats.verdicts import Verdict

if TYPE_CHECKING:
    import pandas as pd


@dataclasses.dataclass
class Level:
    """One version as measured: its runs of the point (report.tables.tidy rows) and each run's per-process samples."""

    rows: pd.DataFrame
    samples: dict[str, list[list[float]]]  # run id -> one list of per-call samples per measuring process
    reused: bool = False

    @property
    def processes(self) -> list[list[float]]:
        return [p for procs in self.samples.values() for p in procs]

    @property
    def medians(self) -> list[float]:
        import numpy as np  # numpy: only once something is measured

        return [float(np.median(p)) for p in self.processes]


class UnpairedSteps:
    """The search's steps for a Bisection `b` without a design, over the Range `r` of its versions, the sweep's one
    job `job`, under the parent run `parent`: each version's level, measured once (or found in the store)."""

    def __init__(self, b, r, job, parent: str):
        self.b, self.r, self.job, self.parent = b, r, job, parent
        self.point, self.op = job.points[0], job.points[0].ops[0]
        self.fingerprints: dict[str, str | None] = {}  # version -> its environment's fingerprint, probed once
        self.levels: dict[str, Level] = {}

    def stored(self, v: str) -> Level | None:
        """The version's FINISHED runs of this point in this environment, from the store."""
        import pandas as pd  # pandas, mlflow and the worker's probe: only once measuring
        from experiments.harness import manager
        from experiments.report import tables
        from experiments.store import records, tracking

        python, c, s = str(self.r.envs[v].python), self.job.config, self.b.sweep
        if v not in self.fingerprints:  # a runner's fingerprint comes from what it prints: none to probe
            self.fingerprints[v] = None if c.framework.name == EXTERNAL else manager.probe(
                [(python, str(c.framework.name), self.job.setup, str(c.runtime.allocator))])[0][1]
        fingerprint = self.fingerprints[v]
        rows, samples = [], {}
        for r in range(s.repeats):
            config = dataclasses.replace(c, runtime=dataclasses.replace(c.runtime, python=python), repeat=r)
            key = records.point_key(dataclasses.replace(self.job, config=config), self.point)
            found = tables.tidy(tracking.Store(s.uri).search(
                s.experiment, f"attributes.status = 'FINISHED' and tags.point_key = '{key}'"))
            if found.empty:
                continue
            found = found[found["op"] == self.op]
            if fingerprint:
                found = found[found["env_fingerprint"] == fingerprint]
            for run_id in found["run_id"]:
                entry = tracking.Store(s.uri).load_samples(run_id)[self.op]
                samples[run_id] = [p["samples_s"] for p in entry.get("processes", [entry])]
            rows.append(found)
        return Level(pd.concat(rows), samples) if samples else None

    def measure(self, versions: list[str]) -> None:
        """Each version's level: from the store, else measured now (one sweep for those missing, interleaved)."""
        todo = []
        for v in versions:
            if v in self.levels or self.r.env(v) is None:
                continue
            if level := self.stored(v):
                self.levels[v] = dataclasses.replace(level, reused=True)
                self.r.say(f"{v}: {len(level.processes)} processes already in the store "
                           f"(runs {', '.join(level.samples)})")
            else:
                todo.append(v)
        if not todo:
            return
        self.r.say(f"measuring {', '.join(todo)}")
        across_envs.across(self.b.sweep, [self.r.envs[v].python for v in todo], self.parent)
        for v in todo:
            if level := self.stored(v):
                self.levels[v] = level
            else:
                self.r.skip(v, "measured nothing (the sweep's output above says why)")

    def verdict(self, old: str, new: str) -> Comparison:
        return judge([(self.levels[old].medians, self.levels[new].medians)], self.b.threshold, self.b.alpha)[0]

    def end(self, i: int, step: int) -> int | None:
        """The first version from index `i` on (step +1) or back (step -1) that can be measured."""
        while 0 <= i < len(self.r.versions):
            self.measure([self.r.versions[i]])
            if self.r.versions[i] in self.levels:
                return i
            i += step
        return None

    def judged(self, lo: int, i: int) -> Comparison:
        """The version at `i` against the one at `lo`, said."""
        vs = self.r.versions
        v = self.verdict(vs[lo], vs[i])
        self.r.say(f"{vs[lo]} → {vs[i]}: {v.verdict} (×{v.ratio:.3f} [{v.ci_low:.3f}, {v.ci_high:.3f}], "
                   f"p {v.p_value:.2g})")
        return v

    def ends(self) -> tuple[int, int, Comparison] | None:
        """The first and the last version of the range that can be measured (both ends measured in one sweep):
        their indices and their verdict; None where there are no two."""
        vs = self.r.versions
        self.measure([vs[0], vs[-1]])
        lo = 0 if vs[0] in self.levels else self.end(1, +1)
        hi = len(vs) - 1 if vs[-1] in self.levels else self.end(len(vs) - 2, -1)
        if lo is None or hi is None or hi <= lo:
            return None
        return lo, hi, self.judged(lo, hi)

    def probe(self, start: int, lo: int, i: int) -> Comparison | None:
        """The version at `i` against the last one at the start's level (`lo`); None where it can't be measured."""
        self.measure([self.r.versions[i]])
        return self.judged(lo, i) if self.r.versions[i] in self.levels else None

    def changed(self, v: Comparison) -> bool:
        """Beyond the threshold: an inconclusive verdict counts as the start's level."""
        return v.verdict.changed

    def unchanged(self, lo: int, hi: int, v: Comparison) -> str:
        vs = self.r.versions
        return f"the ends {vs[lo]} and {vs[hi]} don't differ ({v.verdict}): nothing to bisect"

    def evidence(self, lo: int, hi: int) -> Comparison:
        return self.verdict(self.r.versions[lo], self.r.versions[hi])

    def note(self, lo: int, hi: int, v: Comparison) -> str:
        vs = self.r.versions
        return "" if v.verdict != Verdict.SAME else (
            f"the step {vs[lo]} → {vs[hi]} alone is below the verdict's reach: the change may be spread over several "
            "versions (nnbench versions and history show them all)")

    def answer(self, found, note: str) -> dict:
        """What --json prints: the first changed version and its evidence."""
        vs = self.r.versions
        out = {"package": self.b.package, "range": self.b.range, "versions": vs,
               "measured": [v for v in vs if v in self.levels],
               "skipped": self.r.skipped, "first_changed": vs[found[1]] if found else None, "note": note,
               "parent_run_id": self.parent, "verdict": str(found[2].verdict) if found else str(Verdict.SAME)}
        if found:
            lo, _, v = found
            out |= {"before": vs[lo], "ratio": v.ratio, "ci95": [v.ci_low, v.ci_high], "p_value": v.p_value}
        return out

    def said(self, found, note: str, measured: list[str]) -> str:
        """The evidence in words: the first change (or why there is none), each version's median and the interval a
        re-run lands in, what was measured and what was reused."""
        from experiments.measure.stats import median_of_medians, rerun_interval  # numpy: only at the end

        vs, lines = self.r.versions, []
        for v in measured:
            lv = self.levels[v]
            lo, hi = rerun_interval(lv.processes) if len(lv.processes) > 1 else (float("nan"),) * 2
            lines.append(f"  {v}: {median_of_medians(lv.processes) * 1e3:.4g} ms [{lo * 1e3:.4g}, {hi * 1e3:.4g}] "
                         f"({len(lv.processes)} processes{', from the store' if lv.reused else ''})")
        if found:
            lo, hi, v = found
            head = (f"first changed at {self.b.package} {vs[hi]} ({vs[lo]} → {vs[hi]}): {v.verdict}, ×{v.ratio:.3f} "
                    f"[{v.ci_low:.3f}, {v.ci_high:.3f}], p {v.p_value:.2g}")
        else:
            head = f"no change found: {note}"
        fresh = [v for v in measured if not self.levels[v].reused]
        tail = (f"measured {len(fresh)} of {len(vs)} versions ({', '.join(fresh) or 'none'}); from the store: "
                f"{', '.join(v for v in measured if self.levels[v].reused) or 'none'}; skipped: "
                f"{', '.join(self.r.skipped) or 'none'}")
        return "\n".join([head, "(median per call and the interval a re-run lands in)", *lines,
                          *([f"note: {note}"] if note and found else []), tail])

    def along(self, found, measured: list[str]):
        """The measured versions as a report.regressions.History along `<package> version`, the change found its one
        regression."""
        import pandas as pd  # pandas: only at the end
        from experiments.report import regressions
        from experiments.report.tables import POINT

        vs, by = self.r.versions, f"{self.b.package} version"
        t = pd.concat([self.levels[v].rows.assign(**{by: v}) for v in measured], ignore_index=True)
        medians = {run_id: m for v in measured for run_id, procs in self.levels[v].samples.items()
                   for m in [[float(pd.Series(p).median()) for p in procs]]}
        s = regressions.series(t, by, lambda run_id, op: medians[run_id])
        r = regressions.regressions(s.iloc[:0])
        if found:
            lo, hi, v = found
            row = s[s["value"] == vs[hi]].iloc[0]
            r = pd.DataFrame([{k: row[k] for k in POINT} | {
                "where": vs[hi], "before": vs[lo], "after": vs[hi],
                "before_median_s": float(pd.Series(self.levels[vs[lo]].medians).median()),
                "after_median_s": float(pd.Series(self.levels[vs[hi]].medians).median()), "ratio": v.ratio,
                "ci95_low": v.ci_low, "ci95_high": v.ci_high, "p_value": v.p_value, "q_value": v.q_value,
                "verdict": v.verdict, "processes_before": v.processes_old, "processes_after": v.processes_new}])
        return regressions.History(s, r, measured, by)

    def report(self, found, note: str, title: str, run) -> tuple[int, dict]:
        """The evidence on the console and in the parent run `run` (its description, the CSVs, a trend plot with the
        change marked), which closes it; the exit code and the answer."""
        from experiments.compare import history  # pandas, matplotlib and mlflow: only at the end
        from experiments.store import tracking

        vs = self.r.versions
        measured = [v for v in vs if v in self.levels]
        text = self.said(found, note, measured)
        print(f"\n{title}\n{text}")
        h = self.along(found, measured)
        tracking.Store(self.b.sweep.uri).set_tags(self.parent, {
            "first_changed": vs[found[1]] if found else "none", "verdict": found[2].verdict if found else Verdict.SAME,
            "measured": " ".join(measured), "skipped": " ".join(self.r.skipped)})
        history.log(h, title, run, note=text)
        print(f"parent run {self.parent} in {self.b.sweep.uri}")
        return OK, self.answer(found, note)

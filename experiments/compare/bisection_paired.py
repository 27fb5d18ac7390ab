"""A bisect's steps judged paired (the default): each probed version compared with the range's start as `nnbench ab
runtime.python=START,PROBE` would, on the one point, nested under the bisect's parent run; then the first changed
version with its neighbour, for the evidence. The search itself is compare.bisection's."""
from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from experiments.common.errors import LOST, OK
from experiments.stats.verdicts import Verdict

if TYPE_CHECKING:  # the sweep and its records: imported only once measuring (`PairedSteps.compared`)
    from experiments.compare.paired import CellVerdict


@dataclass(frozen=True)
class Step:
    """One step of the search: `b` against `a` on the point, its cell's paired verdict, or why it has none (the op
    can't run in an environment, or the sweep failed: `skipped`)."""

    a: str
    b: str
    cell: CellVerdict | None = None
    skipped: str | None = None

    @property
    def verdict(self) -> Verdict:
        return self.cell.verdict if self.cell is not None else Verdict.UNKNOWN

    def as_json(self) -> dict:
        """The step as --json lists it."""
        if self.cell is None:
            return {"a": self.a, "b": self.b, "ratio": None, "interval": [None, None], "verdict": str(self.verdict),
                    "pairs": 0, "skipped": self.skipped}
        c = self.cell
        return {"a": self.a, "b": self.b, **c.judged.as_step(), "skipped": None, "run_id": c.run_id,
                "profile": c.profile and c.profile.said()}

    def said(self) -> str:
        """In words: `×1.510 [1.470, 1.550], slower, 6 pairs`, or why it was skipped."""
        return self.cell.judged.brief() if self.cell is not None else f"no ratio, skipped: {self.skipped}, 0 pairs"


class PairedSteps:
    """The search's steps for a Bisection `b` with a design, over the Range `r` of its versions, under the parent run
    `parent`: ab's verdicts (B/A, the newer over the older) in the order compared, each pair compared once."""

    def __init__(self, b, r, parent: str):
        self.b, self.r, self.parent = b, r, parent
        self.steps: list[Step] = []
        self.unsettled = False  # a step stayed inconclusive at --max-pairs: the bisect stopped there
        self.out = Path(tempfile.mkdtemp(prefix="nnbench-bisect-"))

    def label(self, v: str) -> str:
        return f"{self.b.package}=={v}"

    def compared(self, old: str, new: str) -> Step | None:
        """The step `new` against `old` on the point, compared now or earlier in this bisect; None where the op can't
        run in one of them (`new` skipped)."""
        sides = [self.label(old), self.label(new)]
        row = next((r for r in self.steps if [r.a, r.b] == sides), None)
        if row is None:
            from experiments.compare import along_axis, paired  # the sweep and its records: only once measuring

            s, out = self.b.sweep, self.out / f"{old}-{new}"
            pythons = ",".join(f"'{self.r.envs[v].python}'" for v in (old, new))
            code, rows = along_axis.compared(along_axis.Along((f"runtime.python={pythons}", *s.overrides,
                                                               "report.along=runtime.python",
                                                               *self.b.design.overrides()), out, s.uri,
                                                              s.experiment, self.parent, s.quiet))
            if code in paired.STOPPED:  # the sweep was interrupted (it said so, and closed its runs)
                raise paired.Stopped()
            row = step(sides, rows, out)
            self.steps.append(row)
            self.r.say(f"{new} against {old}: {row.said()}")
        if row.skipped:
            self.r.skipped[new] = f"the op can't run: {row.skipped}"
        return None if row.skipped else row

    def ends(self) -> tuple[int, int, Step] | None:
        """The range's first version that can be built, and the last one that can be compared with it: their
        indices and the ends' row; None where there are no two."""
        vs = self.r.versions
        start = next((i for i, v in enumerate(vs) if self.r.env(v) is not None), None)
        hi, row = len(vs) - 1, None
        while start is not None and hi > start and (row := self.probe(start, start, hi)) is None:
            hi -= 1
        return None if row is None else (start, hi, row)

    def probe(self, start: int, lo: int, i: int) -> Step | None:
        """The version at `i` against the start (each verdict answers: still at the start's level?); None where it
        is skipped."""
        vs = self.r.versions
        return None if self.r.env(vs[i]) is None else self.compared(vs[start], vs[i])

    def changed(self, row: Step) -> bool | None:
        """Beyond the threshold (True), within it (False), or unsettled (None)."""
        v = row.verdict
        return True if v.changed else False if v == Verdict.SAME else None

    def unchanged(self, lo: int, hi: int, row: Step) -> str:
        vs = self.r.versions
        if row.verdict == Verdict.SAME:
            return f"the ends {vs[lo]} and {vs[hi]} don't differ ({row.said()})"
        return self.stopped(row, lo, hi, f"the ends {vs[lo]} → {vs[hi]}")

    def stopped(self, row: Step, lo: int, hi: int, what: str) -> str:
        """The one line of a step that stayed inconclusive: the versions, where the change lies, what to do."""
        self.unsettled = True
        vs, t, most = self.r.versions, self.b.threshold, self.b.design.max_pairs or "the bench preset's"
        return (f"inconclusive: {what}: {row.said()}, neither beyond nor within ±{t:.0%}; the first change, if any, "
                f"lies after {vs[lo]} and at or before {vs[hi]} ({vs[lo]}..{vs[hi]}): not guessing; raise "
                f"--max-pairs (now {most}) or --threshold, or run it on a quieter machine")

    def evidence(self, lo: int, hi: int) -> Step | None:
        """The first changed version against its neighbour, paired."""
        return self.compared(self.r.versions[lo], self.r.versions[hi])

    def note(self, lo: int, hi: int, row: Step) -> str:
        return ""

    def answer(self, found, note: str) -> dict:
        """What --json prints: the first changed version, its neighbour's paired evidence, and every step."""
        vs = self.r.versions
        out = {"package": self.b.package, "range": self.b.range, "versions": vs, "paired": True,
               "measured": [v for v in vs if any(self.label(v) in (r.a, r.b) for r in self.steps)],
               "skipped": self.r.skipped, "first_changed": vs[found[1]] if found else None, "note": note,
               "inconclusive": self.unsettled, "parent_run_id": self.parent,
               "steps": [r.as_json() for r in self.steps]}
        if found:
            lo, _, row = found
            said = row.as_json()
            out |= {"before": vs[lo], "ratio": said["ratio"], "ci95": said["interval"], "pairs": said["pairs"],
                    "verdict": said["verdict"]}
        else:
            out["verdict"] = str(Verdict.INCONCLUSIVE if self.unsettled else Verdict.SAME)
        return out

    def said(self, found, note: str, measured: list[str]) -> str:
        """The evidence in words: the first change (or why there is none), each step, what was measured."""
        vs = self.r.versions
        if found:
            lo, hi, row = found
            head = f"first changed at {self.b.package} {vs[hi]} ({vs[lo]} → {vs[hi]}): {row.said()}"
            if not row.verdict.changed:  # changed from the start, not in one step
                note = note or (f"the step {vs[lo]} → {vs[hi]} alone reads {row.verdict}: the change from "
                                f"{vs[0]} may be spread over several versions (nnbench versions shows each step)")
        else:
            head = note if self.unsettled else f"no change found: {note}"
        n = len(self.steps)
        tail = (f"{n} paired comparison{'s' * (n != 1)}, measuring {len(measured)} of {len(vs)} versions "
                f"({', '.join(measured) or 'none'}); skipped: {', '.join(self.r.skipped) or 'none'}")
        lines = [f"  {r.b.split('==')[-1]} against {r.a.split('==')[-1]}: {r.said()}" for r in self.steps]
        if found and found[2].cell.profile:  # where the time went, both sides profiled (--no-profile: not)
            head += f"\n  {vs[found[0]]} → {vs[found[1]]}: {found[2].cell.profile.said()}"
        return "\n".join([head, "(paired, each step newer over older: the ratio, its 95% interval, the verdict)",
                          *lines, *([f"note: {note}"] if note and found else []), tail])

    def report(self, found, note: str, title: str, run) -> tuple[int, dict]:
        """The evidence on the console and in the parent run `run` (its description, bisect.json), which closes it;
        the exit code (1 where a step stayed inconclusive) and the answer."""
        answer = self.answer(found, note)
        text = self.said(found, note, answer["measured"])
        print(f"\n{title}\n{text}")
        tags = {"first_changed": answer["first_changed"] or "none", "verdict": answer["verdict"], "paired": "true",
                "measured": " ".join(answer["measured"]), "skipped": " ".join(self.r.skipped)}
        with tempfile.TemporaryDirectory() as tmp:
            Path(tmp, "bisect.json").write_text(json.dumps(answer, indent=1, default=str))
            run.finish(Path(tmp), note=text, tags=tags)
        if found and self.b.issue:
            self.drafted(found, self.b.issue)
        print(f"parent run {self.parent} in {self.b.sweep.uri}")
        return LOST if self.unsettled else OK, answer


    def drafted(self, found, issue: Path) -> None:
        """The first change's upstream report draft, where it is slower (`compare.upstream`)."""
        from experiments.compare import along_axis, paired  # the exports and the script: only when asked

        out = self.out / f"{self.r.versions[found[0]]}-{self.r.versions[found[1]]}"
        command = f"nnbench bisect {self.b.package} {self.b.range} {' '.join(self.b.sweep.overrides)}"
        along_axis.drafted(paired.verdicts(out), out, along_axis.Asked(command, issue=issue))


def step(sides: list[str], rows: list, out: Path) -> Step:
    """A step from its sweep's verdicts: the one cell's, or why there is none (the op can't run in an environment,
    or the sweep failed: its dir says why)."""
    if not rows:
        return Step(*sides, skipped=f"no paired verdict: the sweep's records in {out} say why")
    (r,) = rows
    return Step(*sides, cell=r)

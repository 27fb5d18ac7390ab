"""How a sweep (or a single run) ends: its points counted from disk and looked up in the store, its parent run
closed, one last line `N finished, K skipped, F failed`, and an exit code that is 0 only when nothing was lost.

Jobs may have run in other processes (joblib, submitit), so nothing here trusts process memory: the points are
the record.json files under the sweep dir, and a point counts as logged only when the store holds its run
(named by its `mlflow_run_id` marker) complete and closed.
"""
from __future__ import annotations

import json
import signal
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from experiments.common.config import DEFAULT_BASELINE
from experiments.common.errors import LOST, fail, first_line
from experiments.harness import manager
from experiments.store import view
from experiments.store.records import META
from experiments.store.sweepdir import MARKER, Sweep, SweepState
from experiments.sweep import changes, opening, paired_engine, stopping

UPLOAD = "nnbench upload"
RESUME = "the same command with resume=true measures only what is missing"


@dataclass
class Outcome:
    """The points of one sweep dir by outcome, and which of them the store does not hold yet."""

    counts: Counter = field(default_factory=Counter)  # ok, skipped, failed, interrupted
    not_logged: list[Path] = field(default_factory=list)
    planned: int | None = None
    store_error: str | None = None  # the store could not be asked which points it holds
    why_not_logged: str | None = None  # what the store said of a run it holds half-logged
    resumed: int = 0  # points resume=true found FINISHED in the store, and skipped

    @property
    def kept(self) -> int:
        return sum(self.counts.values())

    @property
    def complete(self) -> bool:
        """Every planned point has a record, and the store holds each one's complete run."""
        return not (self.not_logged or self.missing or self.store_error)

    @property
    def missing(self) -> int:
        """Planned points without a record: lost, or (after an interrupt) never measured."""
        return max((self.planned or 0) - self.kept, 0)

    def line(self, missing_as: str = "lost") -> str:
        c = self.counts
        out = f"{c['ok']} finished, {c['skipped']} skipped, {c['failed']} failed"
        out += f", {c['interrupted']} interrupted" if c["interrupted"] else ""
        why = f" ({self.why_not_logged})" if self.why_not_logged else ""
        out += f", {len(self.not_logged)} not logged{why}" if self.not_logged else ""
        out += f", {self.resumed} already in the store (resume)" if self.resumed else ""
        return out + (f", {self.missing} {missing_as}" if self.missing else "")


def outcome(sweep: Sweep, state: SweepState) -> Outcome:
    """Count the points on disk, and ask the store about the run each marker names."""
    from experiments.store import tracking  # mlflow is slow to import: only at the end

    dirs = sweep.point_dirs()
    out = Outcome(Counter(json.loads((d / META).read_text())["outcome"] for d in dirs), planned=state.points,
                  resumed=sum(map(len, state.resumed.values())))
    markers = {d: (d / MARKER).read_text().strip() for d in dirs if (d / MARKER).exists()}
    try:
        found = tracking.Store(state.uri).get_runs(list(markers.values()))
        out.not_logged = [d for d in dirs if not tracking.is_complete(found.get(markers.get(d)))]
        out.why_not_logged = next((why for r in found.values() if r and (why := tracking.incomplete_reason(r))), None)
    except Exception as e:
        out.store_error = f"could not ask the store at {state.uri} which of them it holds ({first_line(e)})"
    return out


def close_parent(state: SweepState, status: str, o: Outcome, baseline: str = DEFAULT_BASELINE,
                 wall_s: float | None = None, sweep_dir: Path | None = None) -> tuple[int, list[str]]:
    """The sweep's answer on its parent run (description, metrics, tags, the headline in its name), its report as
    artifacts, then its status; returns the number of point runs and the cells found slower than the baseline,
    paired. `wall_s`: the sweep's wall time, when it ends now (its summary and headline are then printed too);
    `sweep_dir`: where the paired trials' evidence is."""
    from experiments.report import answer, pages, tables  # matplotlib and mlflow are slow to import: only at the end
    from experiments.store import tracking
    from experiments.store.parent import Parent

    store = tracking.Store(state.uri)
    runs = store.children(state.experiment_id, state.parent_run_id)
    t = tables.tidy(runs)
    evidence = paired_engine.Answer.read_all(sweep_dir) if sweep_dir else []
    c = o.counts
    metrics = {"points_finished": c["ok"], "points_skipped": c["skipped"], "points_failed": c["failed"],
               "points_interrupted": c["interrupted"]} | ({"sweep_wall_s": wall_s} if wall_s is not None else {})
    tags = {f"machine_{k}": v for k, v in state.machine.facts.items()} if state.machine else {}
    if state.machine:
        metrics |= state.machine.metrics()
        tags["machine_noisy"] = str(state.machine.noisy).lower()
    note = f"**{o.line()}**: no point was measured" if t.empty else ""
    with tempfile.TemporaryDirectory() as tmp:
        if not t.empty:
            headline = answer.headline(t, baseline, evidence)
            tags |= {tracking.HEADLINE: headline} if headline else {}  # into the run's name too
            written = pages.write(t, Path(tmp), baseline, f"nnbench sweep {state.parent_run_id}", headline)
            metrics |= answer.metrics(t, baseline, evidence) | answer.peak(runs)[0]
            tags |= answer.peak(runs)[1]
            note = answer.note(t, runs, baseline, o.line(), sorted(written), evidence)
            if wall_s is not None:
                print(tables.markdown(tables.summary(t, baseline)) + f"\n\n{headline}")
                if sweep_dir and (said := changes.said(sweep_dir)):  # report.profile_changed
                    print("\nwhere the time went, B's profile against A's:\n" + "\n".join(said))
        Parent(store, state.parent_run_id, status).finish(Path(tmp), note, answer.environment(runs) | tags, metrics)
    return len(runs), answer.slower(t, baseline) if not t.empty else []


def finish(sweep: Sweep, report) -> int:
    """The end of a sweep or single run that ran to its end: report, close, last line; returns the exit code
    (`whole`'s where every point was kept)."""
    from experiments.store.parent import ending  # mlflow is slow to import: only at the end

    baseline = report.baseline
    state = sweep.read()
    o = outcome(sweep, state)
    cut = o.counts["interrupted"]  # a job interrupted in a launcher's process (SLURM's SIGTERM at a time limit)
    complete = o.complete and not cut
    problem, slower = o.store_error, []
    if state.parent_run_id and not problem:
        try:
            status = ending(interrupted=bool(cut), failed=not complete)
            n, slower = close_parent(state, status, o, baseline, time.time() - state.start, sweep.directory)
            print(f"\n{n} runs under parent {state.parent_run_id} in {state.uri}")
            where = "" if state.uri.startswith("http") else " (after `nnbench ui`)"
            print(f"the sweep's answer{where}: {view.run_link(state.experiment_id, state.uri, state.parent_run_id)}")
            print(f"runs table{where}: {view.run_link(state.experiment_id, state.uri)}")
        except Exception as e:  # every point is on disk already; upload makes the report later
            why, complete = first_line(e), False
            problem = ("the sweep's report is not in the store either" if why == o.why_not_logged else
                       f"could not finish the sweep's report and parent run ({why})")
    sweep.end("finished" if complete else "incomplete")
    if complete:
        return whole(o, report, slower, sweep)
    unmeasured = "not measured" if cut else "lost"
    why = f"; {problem}" if problem else ""
    head = "nnbench: interrupted" if cut else "nnbench: error"
    print(f"{head}: {o.line(missing_as=unmeasured)}{why}; the points are kept in {sweep.directory}: "
          f"{UPLOAD} {sweep.directory} logs what the store lacks and closes the sweep; {RESUME}", file=sys.stderr)
    return LOST


def whole(o: Outcome, report, slower: list[str], sweep: Sweep) -> int:
    """The last line of a sweep that kept every point, and its exit code: 1 where it measured none, or where
    `report.fail_on_regression` and a variant is slower than the baseline."""
    print(o.line())
    if o.kept and not o.counts["ok"]:
        print(f"nnbench: error: no point was measured: each one's reason is above and on its run "
              f"(failure_reason, skip_reason_<op>), the points in {sweep.directory}", file=sys.stderr)
        return LOST
    if report.fail_on_regression and slower:
        print(f"nnbench: error: slower than {report.baseline} (paired, report.fail_on_regression=true): "
              f"{'; '.join(slower)}", file=sys.stderr)
        return LOST
    return 0


def end(sweep: Sweep, report, what: str = "sweep") -> None:
    """`finish` a sweep or single run (`report`: its config's report keys); exit non-zero when it must. A signal that
    came while it closed waited until it had closed (stopping.defer): say so, and exit 128+signal."""
    manager.close_kept()  # the fork servers the sweep's groups shared: nothing is measured from here
    try:
        code = finish(sweep, report)
    except Exception as e:  # the points are on disk; say where, and fail
        fail(f"the {what} could not end cleanly ({first_line(e)}); its points are kept in {sweep.directory}: "
             f"{UPLOAD} {sweep.directory}", 1)
    if signum := stopping.pending():
        print(f"nnbench: interrupted by {signal.Signals(signum).name} while the {what} closed; it closed all the same",
              file=sys.stderr)
        code = 128 + signum
    if code:
        sys.exit(code)


def stopped(e: stopping.Stop) -> int:
    """After an interrupt or an abort: close the parent (KILLED or FAILED), one line, exit 128+signal or 1."""
    stopping.ignore()
    manager.close_kept()
    stopping.stop_children(None)  # the signal itself was passed on to a launcher's processes once, by the handler
    signum = getattr(e, "signum", None)
    head = (f"nnbench: interrupted by {signal.Signals(signum).name}" if signum else f"nnbench: error: stopped ({e})")
    sweep = opening.ACTIVE
    try:
        print(f"{head}{close_stopped(sweep, interrupted=bool(signum))}", file=sys.stderr)
    except Exception as err:  # the state or the records can't be read: still one line
        print(f"{head}: could not close the sweep ({first_line(err)}); {UPLOAD} {getattr(sweep, 'directory', '.')} "
              "logs what is kept", file=sys.stderr)
    return 128 + signum if signum else 1


def close_stopped(sweep: Sweep | None, interrupted: bool) -> str:
    """Close a stopped sweep's parent run (`interrupted`: by a signal, else an abort); the rest of its last line."""
    from experiments.store import tracking  # mlflow is slow to import: only at the end
    from experiments.store.parent import KILLED, Parent, ending

    if sweep is None:
        return " before anything was measured"
    state = sweep.read()
    o = outcome(sweep, state)
    open_parent, status = "", ending(interrupted, failed=True)
    if state.parent_run_id:
        try:
            Parent(tracking.Store(state.uri), state.parent_run_id).close(status, quiet=False)
        except Exception as err:
            open_parent = f"; its parent run could not be closed ({first_line(err)})"
    sweep.end("interrupted" if status == KILLED else "stopped")
    of = f" of {state.points} points" if state.points else ""
    return (f": {o.line(missing_as='not measured')}{of}, kept in {sweep.directory}{open_parent}; {UPLOAD} "
            f"{sweep.directory} logs what the store lacks and closes the sweep; {RESUME}")


def close_sweep(sweep: Sweep, baseline: str) -> str:
    """After `nnbench upload`: close the sweep's parent run, FINISHED (with the report) once every planned point is
    in the store, KILLED for an interrupted sweep, else FAILED; what was done."""
    from experiments.store import tracking  # mlflow is slow to import: only at the end
    from experiments.store.parent import FAILED, ending

    state = sweep.read()
    parent = tracking.Store(state.uri).get_runs([state.parent_run_id])[state.parent_run_id]
    if parent is None:
        return f"its parent run {state.parent_run_id} is not in {state.uri}"
    o = outcome(sweep, state)
    status = ending(interrupted=state.ended == "interrupted", failed=not o.complete)
    if parent.info.status != status or not tracking.is_complete(parent):
        close_parent(state, status, o, baseline, sweep_dir=sweep.directory)
    missing = f" (planned points without a record: see the job logs in {sweep.directory})" if (
        o.missing and status == FAILED) else ""
    return f"parent run {state.parent_run_id} {status}: {o.line()}{missing}"

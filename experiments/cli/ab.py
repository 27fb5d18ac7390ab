"""Compare two values of one axis, paired: `nnbench ab AXIS=A,B [OVERRIDES]`, e.g.
`nnbench ab framework.compile=true,false framework=torch model=lenet` or `nnbench ab framework=jax,torch model=lenet`.

Each point's op is measured by fresh pairs of warm workers, one with each value (its own interpreter, allocator and
environment, as a sweep's job would have), alternating short bursts while the other is stopped. Prints per point the
ratio B/A (above 1: B is slower), its 95% interval over the pairs, the verdict and the pairs measured (an
inconclusive point gets more pairs, up to --max-pairs); --json prints them as a list of objects. It logs one parent
run for the comparison to the store (--uri) and one child run per point (the ratio, its interval, the verdict, and
every burst's samples as the artifact bursts.json); the pairs' own files stay in --out. docs/comparing.md says when
a paired comparison applies.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from experiments.cli.selection import add_uri
from experiments.common.errors import INTERRUPTED, OK, BadInput, Lost


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("axis", metavar="AXIS=A,B", help="the two values to compare, as a sweep override: "
                                                    "framework.compile=true,false, runtime.python=ENV_A,ENV_B")
    p.add_argument("overrides", nargs="*", help="the rest of the points' config, as for python -m experiments.run")
    add_design(p)
    p.add_argument("--out", type=Path, help="where the pairs' files go (default: a new temporary directory)")
    p.add_argument("--json", action="store_true", help="print the verdicts as a JSON list, one object per point")
    add_uri(p)
    p.add_argument("--experiment", default="nnbench", help="MLflow experiment (default %(default)s)")


def add_design(p: argparse.ArgumentParser, verdict: bool = True) -> None:
    """How each point is compared paired: pairs, bursts, their length and order, and (`verdict`) the verdict's
    threshold and alpha (`nnbench ab`, `versions`; `bisect` has its own, shared with its unpaired search)."""
    from experiments.harness.pairs import BURST_S, MAX_PAIRS, ORDERS, PAIRS, ROUNDS  # light: no framework
    from experiments.report.verdict import ALPHA, PAIRED_THRESHOLD

    p.add_argument("--pairs", type=int, default=PAIRS, help="fresh pairs per point at first (default %(default)s)")
    p.add_argument("--max-pairs", type=int, default=MAX_PAIRS,
                   help="an inconclusive point gets more pairs, up to this many (default %(default)s)")
    p.add_argument("--bursts", type=int, default=ROUNDS,
                   help="bursts per side per pair, one per round (default %(default)s)")
    p.add_argument("--burst-ms", type=float, default=BURST_S * 1e3, help="burst length (default %(default)g ms)")
    p.add_argument("--order", choices=ORDERS, default="abba", help="the sides' order in each round")
    if not verdict:
        return
    p.add_argument("--threshold", type=fraction, default=PAIRED_THRESHOLD,
                   help="slower/faster beyond, no change within 1 ± this: 0.03 or 3%% (default %(default)s)")
    p.add_argument("--alpha", type=float, default=ALPHA,
                   help="significance level of each point's comparison, Benjamini-Hochberg across the points "
                        "(default %(default)s)")


def fraction(text: str) -> float:
    """A threshold as a fraction (`0.05`) or a percentage (`5%`); a number above 1 without `%` is refused."""
    percent = text.strip().endswith("%")
    try:
        x = float(text.strip().rstrip("%"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--threshold {text}: a fraction or a percentage, e.g. 0.03 or 3%") from None
    if not percent and x > 1:
        raise argparse.ArgumentTypeError(f"--threshold {text} would be {x:.0%}: use {x / 100:g} or {x:g}%")
    return x / 100 if percent else x


def design_of(a: argparse.Namespace):
    """The design of the flags, each number checked in one line naming the fix."""
    from experiments.harness import pairs  # psutil and numpy: only once the arguments parse

    checks = [(a.pairs >= 2, f"--pairs {a.pairs}: at least 2 (one pair gives no verdict), e.g. --pairs 6"),
              (a.max_pairs >= a.pairs, f"--max-pairs {a.max_pairs} is below --pairs {a.pairs}: set it at least "
                                       f"{a.pairs}, e.g. --max-pairs {2 * a.pairs}"),
              (a.bursts >= 1, f"--bursts {a.bursts}: at least 1 burst per side per pair, e.g. --bursts 75"),
              (math.isfinite(a.burst_ms) and a.burst_ms > 0, f"--burst-ms {a.burst_ms:g}: a positive length, e.g. "
                                                             "--burst-ms 20"),
              (0 < a.alpha < 1, f"--alpha {a.alpha:g}: a significance level in (0, 1), e.g. --alpha 0.05"),
              (0 <= a.threshold < 1, f"--threshold {a.threshold:g}: a fraction in [0, 1), e.g. 0.03 or 3%")]
    for ok, message in checks:
        if not ok:
            raise BadInput(message)
    return pairs.Design(a.burst_ms / 1e3, a.bursts, a.pairs, a.max_pairs, a.order)


def values(axis: str) -> tuple[str, list[str]]:
    """`key=A,B` as the key and its two values, parsed as Hydra parses a sweep override; BadInput naming the fix."""
    from hydra.core.override_parser.overrides_parser import OverridesParser  # Hydra: only for this command

    try:
        (override,) = OverridesParser.create().parse_overrides([axis])
        vs = list(override.sweep_string_iterator()) if override.is_sweep_override() else []
        raw = getattr(override.value(), "list", None) or vs  # a choice sweep's elements: true, not Hydra's True
        vs = [v.lower() if isinstance(r, bool) else v for v, r in zip(vs, raw)]
    except Exception as e:  # Hydra's own parse errors
        raise BadInput(f"{axis!r} is not AXIS=A,B ({str(e).splitlines()[0]}): e.g. framework.compile=true,false")
    if len(vs) != 2:
        raise BadInput(f"{axis!r} gives {len(vs)} values: nnbench ab compares two, e.g. framework.compile=true,false")
    return override.get_key_element(), vs


def jobs(overrides: list[str]):
    """The jobs of these overrides, through the sweep's own door (composed, checked, probed)."""
    from experiments.sweep import commandline  # Hydra and the door: only for this command

    checked = commandline.explained(["-m", *overrides])
    if checked is None or checked.jobs is None:
        raise BadInput("nnbench ab runs the basic sweeper's jobs: drop hydra/sweeper and the print flags")
    return checked.jobs


@dataclass
class Comparison:
    """Two values of one axis on the points of the other overrides, checked: each side's jobs, job by job."""

    key: str
    values: tuple[str, str]
    labels: tuple[str, str]  # for people: `framework.compile=true`, an environment's spec
    overrides: list[str]
    side_jobs: tuple[list, list]

    @property
    def title(self) -> str:
        return f"ab {self.labels[1]} vs {self.labels[0]} · {' '.join(self.overrides) or 'the default points'}"


def refuse_external(jobs, fix: str) -> None:
    """BadInput, naming `fix`, where a job runs framework=external: its runner times itself, so it can't be paired."""
    if any(str(j.config.framework.name) == "external" for j in jobs):
        raise BadInput("framework=external can't be paired: its runner times itself, so its bursts can't be "
                       f"interleaved with another worker's; {fix}")


def checked(key: str, vs: list[str], overrides: list[str], labels: list[str] | None = None) -> Comparison:
    """Both sides' jobs, composed through the sweep's door; BadInput where they can't be paired."""
    from experiments.common.config import register  # Hydra is slow to import: only once the arguments parsed
    from experiments.sweep import commandline

    if key in {o.lstrip("+~").split("=", 1)[0] for o in overrides}:
        raise BadInput(f"{key} is the axis compared: set it only in AXIS=A,B")
    register(commandline.pythons([*overrides, *(f"{key}={v}" for v in vs)]))  # networks of the sides' environments
    side_jobs = []
    for v in vs:
        side_jobs.append(jobs([*overrides, f"{key}={v}"]))
        refuse_external(side_jobs[-1], "compare it unpaired (python -m experiments.run -m ...)")
    va, vb = vs
    if len(side_jobs[0]) != len(side_jobs[1]):
        raise BadInput(f"{key}={va} makes {len(side_jobs[0])} jobs and {key}={vb} {len(side_jobs[1])}: sweep the "
                       "other axes the same on both sides")
    for ja, jb in zip(*side_jobs):
        if ja.points != jb.points:
            raise BadInput(f"{key}={va} and {key}={vb} measure different points ({ja.points} against {jb.points}): "
                           "set batch_size=N and ops=[...]")
    return Comparison(key, (va, vb), tuple(labels or (f"{key}={v}" for v in vs)), list(overrides), tuple(side_jobs))


def run(a: argparse.Namespace) -> int:
    from experiments.store.uris import store_uri  # the store's modules: only once the arguments parse

    key, vs = values(a.axis)
    design = design_of(a)
    comparison = checked(key, vs, a.overrides)
    uri = store_uri(a.uri)
    store = Store.open(uri, a.experiment, comparison, design)
    out = a.out or Path(tempfile.mkdtemp(prefix="nnbench-ab-"))
    rows = measure(comparison, design, a.threshold, a.alpha, out, store)
    if rows is None:
        return INTERRUPTED
    print(json.dumps(rows, indent=1) if a.json else table(rows))
    if not a.json:  # the JSON holds them
        print(hints(rows))
    print(f"\nparent run {store.parent} in {uri}; pairs' files (every burst's samples): {out}", file=sys.stderr)
    return OK


def measure(comparison: Comparison, design, threshold: float, alpha: float, out: Path, store: "Store",
            prog: str = "nnbench ab") -> list | None:
    """Every job's points compared paired, each point's run logged as its job is judged, then the parent closed;
    None after a Ctrl-C (the parent KILLED, the points judged so far kept). Any other fault closes it FAILED."""
    from experiments.harness import pairs  # numpy, psutil and scipy: only once the comparison is checked
    from experiments.report.verdict import judge_pairs

    rows: list[dict] = []
    try:
        for i, (ja, jb) in enumerate(zip(*comparison.side_jobs)):
            where = out / f"job-{i}"
            sides = [pairs.Side.of(j, label, where / f"cache-{n}")
                     for j, label, n in ((ja, comparison.labels[0], "A"), (jb, comparison.labels[1], "B"))]
            model = ja.config.model["name"]
            frameworks = {"A": str(ja.config.framework.name), "B": str(jb.config.framework.name)}
            variant = ja.variant if ja.variant == jb.variant else f"{jb.variant} over {ja.variant}"
            try:
                judged = pairs.compare(*sides, design, lambda lr: judge_pairs(lr, threshold, alpha), where,
                                       on_pair=progress(model))
            except pairs.Stopped as e:  # the job's points that had their pairs are logged before the parent ends
                rows += store.points(model, e.compared, sides, design, frameworks, variant)
                raise
            rows += store.points(model, judged, sides, design, frameworks, variant)
    except KeyboardInterrupt:
        store.close("KILLED", rows, f"interrupted after {n_points(len(rows))}")
        print(f"{prog}: interrupted: {n_points(len(rows))} logged under {store.parent}; the pairs measured are in "
              f"{out}", file=sys.stderr)
        return None
    except BaseException as e:
        store.close("FAILED", rows, f"failed after {n_points(len(rows))}: {type(e).__name__}: {e}")
        if isinstance(e, StoreLost):
            raise Lost(f"{e}; {n_points(len(rows))} logged under {store.parent}; every pair measured is in "
                       f"{out}") from None
        raise
    store.close("FINISHED", rows)
    return rows


def n_points(n: int) -> str:
    return f"{n} point{'' if n == 1 else 's'}"


def point_row(model: str, c, sides, design, frameworks: dict[str, str], variant: str) -> dict:
    """What `ab` says of one point: the JSON object (`--json`) and the child run's numbers. `variant`: the job's
    (framework, compile, precision), which tells apart the points of `framework=jax,torch` compared along another
    axis."""
    v = c.verdict
    finite = lambda x: None if x is None or x != x else x  # noqa: E731  (NaN: no interval)
    return {"point": {"model": model, "op": c.op, "batch_size": c.batch_size}, "a": sides[0].label,
            "b": sides[1].label, "variant": variant, "ratio": finite(v.ratio),
            "interval": [finite(v.ci_low), finite(v.ci_high)],
            "verdict": str(v.verdict), "pairs": v.pairs, "bursts": design.rounds, "p_value": finite(v.p_value),
            "q_value": finite(v.q_value), "skipped": c.skipped, "oversubscribed": oversubscribed(c, frameworks)}


class StoreLost(Exception):
    """A point's run could not be logged: the store's failure in one line."""


class Store:
    """The comparison in the store: one parent run (the two sides as tags, the verdicts as its description) and one
    child run per point. Every run it starts ends FINISHED, FAILED or KILLED, never RUNNING."""

    def __init__(self, uri: str, experiment_id: str, parent: str):
        self.uri, self.experiment_id, self.parent = uri, experiment_id, parent

    @classmethod
    def open(cls, uri: str, experiment: str, comparison: Comparison, design, parent: str | None = None) -> "Store":
        """The store opened and the parent run started (nested under `parent`, where given); BadInput naming the fix
        for a store that can't be opened."""
        from experiments.store import tracking  # mlflow is slow to import: only once the arguments are checked

        try:
            exp = tracking.open_store(uri, experiment)
        except tracking.StoreUnavailable as e:
            raise BadInput(str(e)) from None
        params = {"axis": comparison.key, "a": comparison.values[0], "b": comparison.values[1],
                  "overrides": " ".join(comparison.overrides), "pairs": design.pairs, "max_pairs": design.max_pairs,
                  "bursts": design.rounds, "burst_ms": f"{design.burst_s * 1e3:g}", "order": design.order}
        run_id = tracking.start_parent(uri, exp, comparison.title, params, parent, kind="ab")
        tracking.set_tags(uri, run_id, {"ab_a": comparison.labels[0], "ab_b": comparison.labels[1], "paired": "true"})
        return cls(uri, exp, run_id)

    def points(self, model: str, judged, sides, design, frameworks: dict[str, str], variant: str) -> list[dict]:
        """A job's judged points, each logged as its child run: what `ab` says of each."""
        from experiments.store.uris import failure  # the store's words: only once measured

        rows = [point_row(model, c, sides, design, frameworks, variant) for c in judged]
        for row, c in zip(rows, judged):
            try:
                row["run_id"] = self.point(row, c, frameworks)
            except Exception as e:  # the store went away while the pairs ran
                raise StoreLost(failure(self.uri, e, "--uri")) from None
        return rows

    def point(self, row: dict, c, frameworks: dict[str, str]) -> str:
        """One point's child run: the point as params, the ratio, interval and pairs as metrics, the verdict as a tag,
        every burst's samples as bursts.json."""
        from experiments.measure.environment import fingerprint  # mlflow and the environment's record: once measured
        from experiments.store import tracking

        p = row["point"]
        params = {**p, "axis_a": row["a"], "axis_b": row["b"], "framework_a": frameworks["A"],
                  "framework_b": frameworks["B"], "variant": row["variant"]}
        name = f"{p['model']} · {p['op']} · bs{p['batch_size']} · {row['b']} vs {row['a']}"
        run_id = tracking.start_parent(self.uri, self.experiment_id, name, params, self.parent, kind="ab_point")
        try:
            metrics = {k: float(x) for k, x in (("ratio", row["ratio"]), ("ci95_low", row["interval"][0]),
                                                ("ci95_high", row["interval"][1]), ("pairs", row["pairs"]),
                                                ("bursts", row["bursts"]), ("p_value", row["p_value"]),
                                                ("q_value", row["q_value"])) if x is not None}
            tags = {"verdict": row["verdict"], "paired": "true", "outcome": "skipped" if row["skipped"] else "ok"}
            tags |= {"skip_reason": row["skipped"]} if row["skipped"] else {}
            tags |= {f"oversubscribed_{side.lower()}": f"in {n} pairs: {hint}"
                     for side, (n, hint) in row["oversubscribed"].items()}
            first = next((pair for pair in c.pairs if pair.ok), None)
            tags |= {f"env_fingerprint_{s}": fingerprint(getattr(first, s).environment) for s in "ab"} if first else {}
            with tempfile.TemporaryDirectory() as tmp:
                Path(tmp, "bursts.json").write_text(json.dumps(bursts(c)))
                tracking.finish_parent(self.uri, run_id, Path(tmp), note=describe(row), metrics=metrics, tags=tags)
        except BaseException:
            tracking.set_status(self.uri, run_id, "FAILED", quiet=True)
            raise
        return run_id

    def close(self, status: str, rows: list[dict], why: str = "") -> None:
        """The parent's description (the verdicts' table, and why it ended early), its artifact ab.json; `status`."""
        from experiments.store import tracking  # mlflow is slow to import: only once measured

        note = (table(rows) if rows else "no point was judged") + (f"\n\n**{status}**: {why}" if why else "")
        try:
            with tempfile.TemporaryDirectory() as tmp:
                Path(tmp, "ab.json").write_text(json.dumps(rows, indent=1))
                tracking.finish_parent(self.uri, self.parent, Path(tmp), status, note)
        except Exception:
            tracking.set_status(self.uri, self.parent, "FAILED", quiet=True)
            if status == "FINISHED":
                raise


def bursts(c) -> dict:
    """Every pair of a point with every burst's per-call seconds, in the order they ran."""
    return {"op": c.op, "batch_size": c.batch_size, "pairs": [
        {"index": p.index, "order": p.order, "log_ratio": p.log_ratio, "wall_s": p.wall_s, "failure": p.failure,
         "a": [b.samples_s for b in p.a_bursts], "b": [b.samples_s for b in p.b_bursts]} for p in c.pairs]}


def describe(row: dict) -> str:
    lo, hi = row["interval"]
    interval = f" [{lo:.4f}, {hi:.4f}]" if lo is not None else ""
    what = f"skipped: {row['skipped']}" if row["skipped"] else row["verdict"]
    return f"paired: B/A {row['ratio']:.4f}{interval}, {what}, {row['pairs']} pairs ({row['b']} over {row['a']})"


def oversubscribed(c, frameworks: dict[str, str]) -> dict[str, tuple[int, str]]:
    """Per side, in how many pairs its threads outnumbered the free cores, and the last hint."""
    out = {}
    for name, fw in frameworks.items():
        hints = [h for p in c.pairs if p.ok and (h := p.oversubscribed(name, fw))]
        if hints:
            out[name] = (len(hints), hints[-1])
    return out


def progress(model: str):
    def said(c, pair) -> None:
        what = pair.failure or (f"B/A {math.exp(pair.log_ratio):.3f}" if pair.log_ratio is not None else
                                f"skipped: {c.skipped}")
        print(f"{model} {c.op} bs{c.batch_size}: pair {pair.index + 1}: {what} ({pair.wall_s:.1f} s)", file=sys.stderr,
              flush=True)
    return said


def hints(rows: list[dict]) -> str:
    """One OVERSUBSCRIBED line per side and point whose threads outnumbered the free cores."""
    return "\n".join(f"OVERSUBSCRIBED: {r['point']['model']} {r['point']['op']} bs{r['point']['batch_size']} "
                     f"{r[name.lower()]}: in {n} of {r['pairs']} pairs, {hint}"
                     for r in rows for name, (n, hint) in r["oversubscribed"].items())


def table(rows: list[dict]) -> str:
    from tabulate import tabulate  # only once measured

    several = len({r.get("variant") for r in rows}) > 1  # framework=jax,torch along another axis: say which
    body = [[r["point"]["model"], *([r["variant"]] if several else []), r["point"]["op"], r["point"]["batch_size"],
             f"{r['ratio']:.3f}",
             f"[{r['interval'][0]:.3f}, {r['interval'][1]:.3f}]" if r["interval"][0] is not None else "",
             r["skipped"] and f"skipped: {r['skipped']}" or r["verdict"], r["pairs"]] for r in rows]
    head = f"paired, B/A: {rows[0]['b']} over {rows[0]['a']} (above 1: slower)\n" if rows else ""
    return head + tabulate(body, ["model", *(["variant"] if several else []), "op", "batch", "B/A", "95% interval",
                                  "verdict", "pairs"], tablefmt="github")

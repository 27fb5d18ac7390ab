"""Compare two values of one axis, paired: `nnbench ab AXIS=A,B [OVERRIDES]`, e.g.
`nnbench ab framework.compile=true,false framework=torch model=lenet` or `nnbench ab framework=jax,torch model=lenet`.

Each point's op is measured by fresh pairs of warm workers, one with each value (its own interpreter, allocator and
environment, as a sweep's job would have), alternating short bursts while the other is stopped. Prints per point the
ratio B/A (above 1: B is slower), its 95% interval over the pairs, the verdict and the pairs measured (an
inconclusive point gets more pairs, up to --max-pairs). The pairs' files (every burst's samples) are kept in --out.
Nothing is logged to the store. docs/comparing.md says when a paired comparison applies.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path

from experiments.common.errors import OK, BadInput


def add_arguments(p: argparse.ArgumentParser) -> None:
    from experiments.harness.pairs import BURST_S, MAX_PAIRS, ORDERS, PAIRS, ROUNDS  # light: no framework
    from experiments.report.verdict import PAIRED_THRESHOLD

    p.add_argument("axis", metavar="AXIS=A,B", help="the two values to compare, as a sweep override: "
                                                    "framework.compile=true,false, runtime.python=ENV_A,ENV_B")
    p.add_argument("overrides", nargs="*", help="the rest of the points' config, as for python -m experiments.run")
    p.add_argument("--pairs", type=int, default=PAIRS, help="fresh pairs per point at first (default %(default)s)")
    p.add_argument("--max-pairs", type=int, default=MAX_PAIRS,
                   help="an inconclusive point gets more pairs, up to this many (default %(default)s)")
    p.add_argument("--rounds", type=int, default=ROUNDS, help="bursts per side per pair (default %(default)s)")
    p.add_argument("--burst-ms", type=float, default=BURST_S * 1e3, help="burst length (default %(default)g ms)")
    p.add_argument("--order", choices=ORDERS, default="abba", help="the sides' order in each round")
    p.add_argument("--threshold", type=float, default=PAIRED_THRESHOLD,
                   help="slower/faster beyond, no change within 1 ± this (default %(default)s)")
    p.add_argument("--out", type=Path, help="where the pairs' files go (default: a new temporary directory)")
    p.add_argument("--json", action="store_true", help="print the results as JSON")


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


def run(a: argparse.Namespace) -> int:
    from experiments.common.config import register  # Hydra is slow to import: only once the arguments parsed
    from experiments.harness import pairs
    from experiments.report.verdict import judge_pairs

    key, (va, vb) = values(a.axis)
    if key in {o.lstrip("+~").split("=", 1)[0] for o in a.overrides}:
        raise BadInput(f"{key} is the axis compared: set it only in AXIS=A,B")
    try:
        design = pairs.Design(a.burst_ms / 1e3, a.rounds, a.pairs, a.max_pairs, a.order)
    except ValueError as e:
        raise BadInput(f"{e}: e.g. --pairs 6 --max-pairs 12 --rounds 75 --burst-ms 20") from None
    register()
    side_jobs = []
    for v in (va, vb):
        side_jobs.append(jobs([*a.overrides, f"{key}={v}"]))
        if any(str(j.config.framework.name) == "external" for j in side_jobs[-1]):
            raise BadInput("framework=external can't be paired: its runner times itself, so its bursts can't be "
                           "interleaved with another worker's; compare it unpaired (python -m experiments.run -m ...)")
    if len(side_jobs[0]) != len(side_jobs[1]):
        raise BadInput(f"{key}={va} makes {len(side_jobs[0])} jobs and {key}={vb} {len(side_jobs[1])}: sweep the "
                       "other axes the same on both sides")
    for ja, jb in zip(*side_jobs):
        if ja.points != jb.points:
            raise BadInput(f"{key}={va} and {key}={vb} measure different points ({ja.points} against {jb.points}): "
                           "set batch_size=N and ops=[...]")
    out = a.out or Path(tempfile.mkdtemp(prefix="nnbench-ab-"))
    rows = []
    for i, (ja, jb) in enumerate(zip(*side_jobs)):
        where = out / f"job-{i}"
        sides = [pairs.Side.of(j, f"{key}={v}", where / f"cache-{n}") for j, v, n in ((ja, va, "A"), (jb, vb, "B"))]
        judge = lambda lr: judge_pairs(lr, a.threshold)  # noqa: E731
        model, frameworks = ja.config.model["name"], {"A": str(ja.config.framework.name), "B": str(jb.config.framework.name)}
        for c in pairs.compare(*sides, design, judge, where, on_pair=progress(model)):
            rows.append({"model": model, "op": c.op, "batch_size": c.batch_size, "a": sides[0].label,
                         "b": sides[1].label, "skipped": c.skipped,
                         **{k: None if v != v else v for k, v in asdict(c.verdict).items()},  # NaN: no interval
                         "oversubscribed": oversubscribed(c, frameworks)})
    print(json.dumps(rows, indent=1) if a.json else table(rows))
    for r in [] if a.json else rows:  # the JSON holds them
        for name, (n, hint) in r["oversubscribed"].items():
            print(f"OVERSUBSCRIBED: {r['model']} {r['op']} bs{r['batch_size']} {r[name.lower()]}: in {n} of "
                  f"{r['pairs']} pairs, {hint}")
    print(f"\npairs' files (every burst's samples): {out}", file=sys.stderr)
    return OK


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


def table(rows: list[dict]) -> str:
    from tabulate import tabulate  # only once measured

    body = [[r["model"], r["op"], r["batch_size"], f"{r['ratio']:.3f}",
             f"[{r['ci_low']:.3f}, {r['ci_high']:.3f}]" if r["ci_low"] is not None else "",
             r["skipped"] and f"skipped: {r['skipped']}" or r["verdict"], r["pairs"]] for r in rows]
    head = f"B/A: {rows[0]['b']} over {rows[0]['a']} (above 1: slower)\n" if rows else ""
    return head + tabulate(body, ["model", "op", "batch", "B/A", "95% interval", "verdict", "pairs"],
                           tablefmt="github")

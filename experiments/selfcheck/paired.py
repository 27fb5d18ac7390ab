"""How long a paired comparison's bursts should be here, and what it then resolves:
`python -m experiments.selfcheck.paired [--bursts-ms 20,50,100,200] [--pairs 8] [--side-s 1.5] [--planted] [OVERRIDES]`

A/A: the same point on both sides (default: torch LeNet bs32 inference, fork-started workers), `--pairs` fresh pairs
per burst length, the burst lengths interleaved pair by pair (so each sees the same machine), each side's bursts
adding up to `--side-s` seconds per pair (rounds = side_s / burst). Per burst length it prints the spread of the
pairs' B/A (the SD of their log ratios, and the range) by three estimators: the ratio of the medians of all bursts
(the one the verdict uses), the Hodges-Lehmann estimate of the per-round log ratios, and the mean of per-round
ratios; the samples per burst, the wall time per pair, and other processes' CPU use during the bursts.

--planted: a planted slowdown that needs no hooks, `model=matmul_chain model.n=1000` against `model.n=1025` (5.06%
more matmul FLOPs; `model.depth=2 batch_size=32`: a few ms a call), at the first burst length given: every pair's
ratio and the verdicts of disjoint groups of `--group` pairs, against the A/A pairs' groups at the same length.

The machine check runs before and after, and the load average is printed: other work on the machine is what pairing
must survive. Exit 0; it reports, it does not judge.
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from experiments.common.config import register
from experiments.common.errors import OK, BadInput, fail
from experiments.harness import pairs
from experiments.measure import machine, stats
from experiments.measure.meter import background_cores
from experiments.report.verdict import FASTER, PAIRED_THRESHOLD, SLOWER, judge_pairs
from experiments.sweep import commandline

AA = ("framework=torch", "model=lenet", "batch_size=32", "ops=[inference]")
PLANTED = ("framework=torch", "model=matmul_chain", "model.depth=2", "batch_size=32", "ops=[inference]")
PLANTED_N = (1000, 1025)  # (1025/1000)² = 1.0506: the matmuls' FLOPs


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("overrides", nargs="*", help=f"the A/A point (default: {' '.join(AA)})")
    p.add_argument("--bursts-ms", default="20,50,100,200", help="burst lengths to compare (default %(default)s)")
    p.add_argument("--pairs", type=int, default=8, help="pairs per burst length (default %(default)s)")
    p.add_argument("--side-s", type=float, default=1.5, help="seconds of bursts per side per pair (default "
                                                             "%(default)s)")
    p.add_argument("--planted", action="store_true", help="also matmul_chain n=1000 against n=1025")
    p.add_argument("--group", type=int, default=6, help="pairs per judged comparison (default %(default)s)")
    p.add_argument("--out", type=Path, help="the pairs' files (default: a new temporary directory)")


def job(overrides: list[str]):
    checked = commandline.explained(["-m", *overrides])
    if checked is None or not checked.jobs or len(checked.jobs) != 1 or len(checked.jobs[0].points) != 1:
        raise BadInput(f"{' '.join(overrides)}: give one point (one framework, model, batch_size and op)")
    j = checked.jobs[0]
    if len(j.points[0].ops) != 1:
        raise BadInput("give one op, e.g. ops=[inference]")
    return j


def interleaved(sides: dict[float, tuple[pairs.Side, pairs.Side]], n: int, side_s: float, out: Path,
                seed: int = 0) -> dict[float, list[pairs.PairResult]]:
    """`n` pairs per burst length, the lengths in a fresh random order each round; one fork server per side."""
    rng = np.random.default_rng(seed)
    a, b = next(iter(sides.values()))
    servers = {"A": pairs.server(a, out / "server-A.log"), "B": pairs.server(b, out / "server-B.log")}
    results: dict[float, list[pairs.PairResult]] = {burst: [] for burst in sides}
    try:
        for k in range(n):
            for burst in rng.permutation(list(sides)):
                a, b = sides[burst]
                design = pairs.Design(burst_s=float(burst), rounds=max(1, round(side_s / burst)), pairs=1, max_pairs=1)
                r = pairs.run_pair(a, b, a.request.points[0], design, k, servers, out / f"{burst * 1e3:g}ms-{k}", rng)
                results[burst].append(r)
                ratio = f"B/A {math.exp(r.log_ratio):.4f}" if r.log_ratio is not None else f"FAILED: {r.failure}"
                print(f"  pair {k + 1}/{n}, {burst * 1e3:g} ms bursts: {ratio} ({r.wall_s:.1f} s, other processes "
                      f"{busy(r):.2f} cores)", flush=True)
    finally:
        for s in servers.values():
            if s is not None:
                s.close()
    return results


def busy(r: pairs.PairResult) -> float:
    return float(np.median([background_cores(x.meter) for x in r.a_bursts + r.b_bursts])) if r.ok else math.nan


def estimators(r: pairs.PairResult) -> tuple[float, float, float]:
    """log(B/A) three ways: ratio of all bursts' medians, Hodges-Lehmann of round log ratios, mean of round ratios."""
    a, b = [x.samples_s for x in r.a_bursts], [x.samples_s for x in r.b_bursts]
    rounds = stats.round_log_ratios(a, b)
    return stats.pair_log_ratio(a, b), stats.hodges_lehmann(rounds), math.log(float(np.mean(np.exp(rounds))))


def sd(xs) -> float:
    return float(np.std(xs, ddof=1)) if len(xs) > 1 else math.nan


def groups(rs: list[pairs.PairResult], size: int) -> list[str]:
    """The verdicts of disjoint groups of `size` pairs, judged together."""
    lr = [r.log_ratio for r in rs if r.ok]
    chunks = [lr[i:i + size] for i in range(0, len(lr) - size + 1, size)]
    return [v.verdict for v in judge_pairs(chunks)] if chunks else []


def report(results: dict[float, list[pairs.PairResult]], group: int) -> None:
    print("\n| burst | pairs | SD log B/A: medians | Hodges-Lehmann | mean of ratios | B/A range (medians) | "
          f"samples per burst | s per pair | other cores | verdicts of {group}-pair groups |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for burst, rs in sorted(results.items()):
        ok = [r for r in rs if r.ok]
        e = np.array([estimators(r) for r in ok]) if ok else np.zeros((0, 3))
        per = np.median([len(x.samples_s) for r in ok for x in r.a_bursts + r.b_bursts]) if ok else math.nan
        rng = f"{math.exp(e[:, 0].min()):.4f}–{math.exp(e[:, 0].max()):.4f}" if ok else ""
        verdicts = groups(rs, group)
        print(f"| {burst * 1e3:g} ms | {len(ok)} of {len(rs)} | {sd(e[:, 0]):.2%} | {sd(e[:, 1]):.2%} | "
              f"{sd(e[:, 2]):.2%} | {rng} | {per:g} | {np.median([r.wall_s for r in rs]):.1f} | "
              f"{np.nanmedian([busy(r) for r in ok]) if ok else math.nan:.2f} | "
              f"{', '.join(verdicts) or 'too few pairs'} |")


def loaded(what: str) -> None:
    m = machine.check(2.0)
    print(f"{what}: load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}; {m.line()}", flush=True)


def run(a: argparse.Namespace) -> int:
    register()
    bursts = [float(x) / 1e3 for x in a.bursts_ms.split(",")]
    if not bursts or min(bursts) <= 0 or a.pairs < 1 or a.side_s <= 0:
        raise BadInput("--bursts-ms must be positive lengths, --pairs and --side-s positive: e.g. --bursts-ms 20,50")
    out = a.out or Path(tempfile.mkdtemp(prefix="nnbench-paired-"))
    loaded("before")
    t0 = time.perf_counter()
    aa = job(a.overrides or list(AA))
    sides = {b: (pairs.Side.of(aa, "A", out / "cache-A"), pairs.Side.of(aa, "B", out / "cache-B")) for b in bursts}
    print(f"A/A: {aa.model} {aa.points[0].ops[0]} bs{aa.points[0].batch_size} {aa.variant}, {a.pairs} pairs per burst "
          f"length, {a.side_s:g} s of bursts per side per pair")
    results = interleaved(sides, a.pairs, a.side_s, out / "aa")
    report(results, a.group)
    print(f"A/A in {time.perf_counter() - t0:.0f} s")
    if a.planted:
        t0 = time.perf_counter()
        old, new = (job([*PLANTED, f"model.n={n}"]) for n in PLANTED_N)
        b = bursts[0]
        sides = {b: (pairs.Side.of(old, f"n={PLANTED_N[0]}", out / "cache-old"),
                     pairs.Side.of(new, f"n={PLANTED_N[1]}", out / "cache-new"))}
        print(f"\nplanted: matmul_chain n={PLANTED_N[1]} against n={PLANTED_N[0]} ({(PLANTED_N[1] / PLANTED_N[0]) ** 2:.4f}× "
              f"the FLOPs), {b * 1e3:g} ms bursts, {a.pairs} pairs")
        planted = interleaved(sides, a.pairs, a.side_s, out / "planted")
        report(planted, a.group)
        lr = [r.log_ratio for r in planted[b] if r.ok]
        (v,) = judge_pairs([lr]) if lr else [None]
        if v:
            print(f"all {len(lr)} pairs: B/A {v.ratio:.4f} [{v.ci_low:.4f}, {v.ci_high:.4f}], {v.verdict} "
                  f"(threshold {PAIRED_THRESHOLD:.0%})")
        found = groups(planted[b], a.group)
        alarms = groups(results[b], a.group)
        print(f"{a.group}-pair groups: planted found (slower) in {found.count(SLOWER)} of {len(found)}; A/A slower or "
              f"faster in {alarms.count(SLOWER) + alarms.count(FASTER)} of {len(alarms)}")
        print(f"planted in {time.perf_counter() - t0:.0f} s")
    loaded("after")
    print(f"pairs' files: {out}")
    return OK


if __name__ == "__main__":
    prog = "python -m experiments.selfcheck.paired"
    parser = argparse.ArgumentParser(prog=prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser)
    try:
        sys.exit(run(parser.parse_args()))
    except BadInput as e:
        fail(str(e), prog=prog)

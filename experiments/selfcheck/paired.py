"""How long a paired comparison's bursts should be here, and what it then resolves:
`nnbench bursts [--bursts-ms 20,50,100,200] [--pairs 8] [--side-s 1.5] [--planted] [--threads N] [OVERRIDES]`
(also `python -m experiments.selfcheck.paired ...`, its older name)

A/A: the same point on both sides (default: torch LeNet bs32 inference, fork-started workers), `--pairs` fresh pairs
per burst length, the burst lengths interleaved pair by pair (so each sees the same machine), each side's bursts
adding up to `--side-s` seconds per pair (rounds = side_s / burst). Per burst length it prints the spread of the
pairs' B/A (the SD of their log ratios, its robust form, and the range) by four estimators: the median of the
per-round log ratios (the one the verdict uses), their Hodges-Lehmann estimate, the ratio of the medians of all
bursts, and the mean of per-round ratios; the samples per burst, the wall time per pair, and other processes' CPU use
during the bursts.

--planted: a planted slowdown that needs no hooks, `model=matmul_chain model.depth=21` against `model.depth=20`
(`model.n=500 batch_size=32`: 5% more of the same layers, about 10 ms a call), at the first burst length given:
every pair's ratio and the verdicts of disjoint groups of `--group` pairs, against the A/A pairs' groups at the same
length.

--verdicts N: then N whole comparisons each of the A/A point and the planted one, alternating, as `nnbench ab` makes
them (the default design: pairs added while inconclusive): A/A false alarms and planted detections, each with its
exact binomial 95% interval, and the wall time per judged point.

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
from experiments.common.errors import OK, BadInput
from experiments.harness import pairs
from experiments.measure import machine
from experiments.stats import ratios
from experiments.stats.paired import judge_pairs
from experiments.stats.verdicts import PAIRED_THRESHOLD, Verdict
from experiments.sweep import commandline

AA = ("framework=torch", "model=lenet", "batch_size=32", "ops=[inference]")
# 21 layers against 20: 5% more of the same work. (n=1025 against n=1000, 5.06% more FLOPs, read 1.144 [1.109,
# 1.179] in 16 one-thread pairs here: a GEMM of 1025 runs less efficiently than one of 1000.)
PLANTED = ("framework=torch", "model=matmul_chain", "model.n=500", "batch_size=32", "ops=[inference]")
PLANTED_DEPTH = (20, 21)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("overrides", nargs="*", help=f"the A/A point (default: {' '.join(AA)})")
    p.add_argument("--bursts-ms", default="20,50,100,200", help="burst lengths to compare (default %(default)s)")
    p.add_argument("--pairs", type=int, default=8, help="pairs per burst length (default %(default)s)")
    p.add_argument("--side-s", type=float, default=1.5, help="seconds of bursts per side per pair (default "
                                                             "%(default)s)")
    p.add_argument("--planted", action="store_true", help="also matmul_chain n=1000 against n=1025")
    p.add_argument("--group", type=int, default=6, help="pairs per judged comparison (default %(default)s)")
    p.add_argument("--threads", type=int, help="framework.threads on both sides of every comparison")
    p.add_argument("--verdicts", type=int, default=0, metavar="N",
                   help="then N whole comparisons each of the A/A point and the planted one, alternating, with the "
                        "default design (pairs added while inconclusive): the verdicts' rates")
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
                seed: int = 0) -> dict[float, list[pairs.Trial]]:
    """`n` pairs per burst length, the lengths in a fresh random order each round; one fork server per side."""
    rng = np.random.default_rng(seed)
    a, b = next(iter(sides.values()))
    servers = [pairs.server(a, out / "server-A.log"), pairs.server(b, out / "server-B.log")]
    cell = pairs.cells_of(a.request.points)[0]
    results: dict[float, list[pairs.Trial]] = {burst: [] for burst in sides}
    try:
        for k in range(n):
            for burst in rng.permutation(list(sides)):
                a, b = sides[burst]
                design = pairs.Design(burst_s=float(burst), rounds=max(1, round(side_s / burst)), trials=1,
                                      max_trials=1)
                workers = pairs.Workers([a, b], servers, out / f"{burst * 1e3:g}ms-{k}")
                r = pairs.run_pair(workers, cell, design, k, rng)
                results[burst].append(r)
                ratio = f"B/A {math.exp(lr):.4f}" if (lr := r.log_ratio(1, 0)) is not None else f"FAILED: {r.failure}"
                print(f"  pair {k + 1}/{n}, {burst * 1e3:g} ms bursts: {ratio} ({r.wall_s:.1f} s, other processes "
                      f"{busy(r):.2f} cores)", flush=True)
    finally:
        for s in servers:
            if s is not None:
                s.close()
    return results


def ok(r: pairs.Trial) -> bool:
    return r.log_ratio(1, 0) is not None


def busy(r: pairs.Trial) -> float:
    return (r.background_cores() or math.nan) if ok(r) else math.nan  # nan: not measured, or hidden


def estimators(r: pairs.Trial) -> tuple[float, float, float, float]:
    """log(B/A) four ways: the median of the round log ratios (the verdict's), their Hodges-Lehmann estimate, the
    ratio of all bursts' medians, the mean of round ratios."""
    a, b = ([x.samples_s for x in t.bursts] for t in r.turns)
    rounds = ratios.round_log_ratios(a, b)
    return (ratios.pair_log_ratio(a, b), ratios.hodges_lehmann(rounds), ratios.pooled_log_ratio(a, b),
            math.log(float(np.mean(np.exp(rounds)))))


def sd(xs) -> float:
    return float(np.std(xs, ddof=1)) if len(xs) > 1 else math.nan


def robust_sd(xs) -> float:
    """1.4826 × the median absolute deviation: the SD that one far pair does not move."""
    return 1.4826 * float(np.median(np.abs(xs - np.median(xs)))) if len(xs) > 1 else math.nan


def groups(rs: list[pairs.Trial], size: int) -> list[str]:
    """The verdicts of disjoint groups of `size` pairs, judged together."""
    lr = [r.log_ratio(1, 0) for r in rs if ok(r)]
    chunks = [lr[i:i + size] for i in range(0, len(lr) - size + 1, size)]
    return [v.verdict for v in judge_pairs(chunks)] if chunks else []


def report(results: dict[float, list[pairs.Trial]], group: int) -> None:
    print("\n| burst | pairs | SD of log B/A: median of rounds (robust SD) | Hodges-Lehmann | all bursts' medians | "
          f"mean of ratios | B/A range | mean B/A | samples per burst | s per pair | other cores | verdicts of {group}-pair"
          " groups |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for burst, rs in sorted(results.items()):
        good = [r for r in rs if ok(r)]
        e = np.array([estimators(r) for r in good]) if good else np.zeros((0, 4))
        per = np.median([len(x.samples_s) for r in good for t in r.turns for x in t.bursts]) if good else math.nan
        rng = f"{math.exp(e[:, 0].min()):.4f}–{math.exp(e[:, 0].max()):.4f}" if good else ""
        verdicts = groups(rs, group)
        print(f"| {burst * 1e3:g} ms | {len(good)} of {len(rs)} | {sd(e[:, 0]):.2%} ({robust_sd(e[:, 0]):.2%}) | "
              f"{sd(e[:, 1]):.2%} | {sd(e[:, 2]):.2%} | {sd(e[:, 3]):.2%} | {rng} | "
              f"{math.exp(np.mean(e[:, 0])) if good else math.nan:.4f} | "
              f"{per:g} | {np.median([r.wall_s for r in rs]):.1f} | "
              f"{np.nanmedian([busy(r) for r in good]) if good else math.nan:.2f} | "
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
    threads = [f"framework.threads={a.threads}"] if a.threads else []
    aa = job([*(a.overrides or AA), *threads])
    sides = {b: (pairs.Side.of(aa, "A", out / "cache-A"), pairs.Side.of(aa, "B", out / "cache-B")) for b in bursts}
    print(f"A/A: {aa.model} {aa.points[0].ops[0]} bs{aa.points[0].batch_size} {aa.variant}, {a.pairs} pairs per burst "
          f"length, {a.side_s:g} s of bursts per side per pair")
    results = interleaved(sides, a.pairs, a.side_s, out / "aa")
    report(results, a.group)
    print(f"A/A in {time.perf_counter() - t0:.0f} s")
    if a.planted:
        planted(a, bursts[0], threads, out, results[bursts[0]])
    if a.verdicts:
        verdicts(aa, a.verdicts, threads, out / "verdicts")
    loaded("after")
    print(f"pairs' files: {out}")
    return OK


def planted(a: argparse.Namespace, b: float, threads: list[str], out: Path, aa: list[pairs.Trial]) -> None:
    """--planted: the planted slowdown's pairs at the burst length `b`, every pair's ratio and all of them judged
    together; the verdicts of its groups of `--group` pairs against those of the A/A pairs `aa` at that length."""
    t0 = time.perf_counter()
    old, new = (job([*PLANTED, f"model.depth={d}", *threads]) for d in PLANTED_DEPTH)
    sides = {b: (pairs.Side.of(old, f"depth={PLANTED_DEPTH[0]}", out / "cache-old"),
                 pairs.Side.of(new, f"depth={PLANTED_DEPTH[1]}", out / "cache-new"))}
    print(f"\nplanted: matmul_chain depth {PLANTED_DEPTH[1]} against {PLANTED_DEPTH[0]} "
          f"({PLANTED_DEPTH[1] / PLANTED_DEPTH[0]:.2f}× the layers), {b * 1e3:g} ms bursts, {a.pairs} pairs")
    results = interleaved(sides, a.pairs, a.side_s, out / "planted")
    report(results, a.group)
    lr = [r.log_ratio(1, 0) for r in results[b] if ok(r)]
    (v,) = judge_pairs([lr]) if lr else [None]
    if v:
        print(f"all {len(lr)} pairs: B/A {v.ratio:.4f} [{v.ci_low:.4f}, {v.ci_high:.4f}], {v.verdict} "
              f"(threshold {PAIRED_THRESHOLD:.0%})")
    found = groups(results[b], a.group)
    alarms = groups(aa, a.group)
    print(f"{a.group}-pair groups: planted found (slower) in {found.count(Verdict.SLOWER)} of {len(found)}; "
          f"A/A slower or faster in {alarms.count(Verdict.SLOWER) + alarms.count(Verdict.FASTER)} of {len(alarms)}")
    print(f"planted in {time.perf_counter() - t0:.0f} s")


def rate(k: int, n: int) -> str:
    """k of n with its exact (Clopper-Pearson) 95% interval."""
    from scipy.stats import binomtest  # scipy: only once there is something to count

    lo, hi = binomtest(k, n).proportion_ci(0.95) if n else (math.nan, math.nan)
    return f"{k} of {n} [{lo:.0%}, {hi:.0%}]"


def verdicts(aa, n: int, threads: list[str], out: Path) -> None:
    """`n` comparisons each, A/A and planted, as `nnbench ab` makes them: how often A/A says slower or faster, how
    often the planted 5% is found, and the wall time per judged point."""
    old, new = (job([*PLANTED, f"model.depth={d}", *threads]) for d in PLANTED_DEPTH)
    cases = {"A/A": (pairs.Side.of(aa, "A", out / "cache-A"), pairs.Side.of(aa, "B", out / "cache-B")),
             "planted": (pairs.Side.of(old, "old", out / "cache-old"), pairs.Side.of(new, "new", out / "cache-new"))}
    said: dict[str, list] = {case: [] for case in cases}
    for i in range(n):
        for case, (a, b) in cases.items():
            t0 = time.perf_counter()
            (c,) = pairs.compare(a, b, pairs.Design(seed=i), judge_pairs, out / f"{case.replace('/', '')}-{i}")
            v = c.verdict
            said[case].append((v, time.perf_counter() - t0))
            print(f"  {case} {i + 1}/{n}: B/A {v.ratio:.4f} [{v.ci_low:.4f}, {v.ci_high:.4f}] {v.verdict}, {v.pairs} "
                  f"pairs, {time.perf_counter() - t0:.0f} s", flush=True)
    aa_words = [v.verdict for v, _ in said["A/A"]]
    found = [v.verdict for v, _ in said["planted"]]
    walls = [t for case in said.values() for _, t in case]
    print(f"\nverdicts ({n} comparisons each, threshold {PAIRED_THRESHOLD:.0%}):")
    print(f"- A/A slower or faster: {rate(aa_words.count(Verdict.SLOWER) + aa_words.count(Verdict.FASTER), n)}; "
          f"no change {aa_words.count(Verdict.SAME)}, inconclusive {aa_words.count(Verdict.INCONCLUSIVE)}")
    print(f"- planted 5% found (slower): {rate(found.count(Verdict.SLOWER), n)}; "
          f"inconclusive {found.count(Verdict.INCONCLUSIVE)}, no change {found.count(Verdict.SAME)}")
    print(f"- wall time per judged point: median {np.median(walls):.0f} s, at most {max(walls):.0f} s; pairs per "
          f"point: median {np.median([v.pairs for c in said.values() for v, _ in c]):g}")


if __name__ == "__main__":  # the command `nnbench bursts`, by its older name: one parser, one interrupt path
    os.execv(sys.executable, [sys.executable, "-m", "experiments", "bursts", *sys.argv[1:]])

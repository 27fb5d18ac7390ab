"""The machine's own noise: `nnbench check [--seconds 10]` (pyperf's `system` checks, in the spirit).

Times a fixed pure-Python loop back to back in 200 ms windows and prints how much the windows differ (the drift
no stop rule can beat: it bounds how precise any measurement here can be), other processes' CPU use meanwhile,
the load, and what the kernel says of frequency scaling and SMT. Exit 1 when the machine is noisy. Every sweep
runs a short check (bench.machine_check_s) before its first job and logs it on its parent run.
"""
from __future__ import annotations

import argparse
import dataclasses
import json

from experiments.common.errors import LOST, OK
from experiments.common.options import positive
from experiments.measure.machine import NOISY_OTHER_CORES, NOISY_WINDOW_SD, WINDOW_S, check


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print what the check read as one JSON object, nothing else")
    p.add_argument("--seconds", type=positive("--seconds", "10", least=WINDOW_S * 2, strict=False), default=10.0,
                   help="how long to time the loop (default %(default)s)")


def run(a: argparse.Namespace) -> int:
    m = check(a.seconds)
    if a.json:
        print(json.dumps(dataclasses.asdict(m) | {"seconds": a.seconds, "noisy": m.noisy, "line": m.line()}, indent=1))
        return LOST if m.noisy else OK
    print(f"fixed loop, {WINDOW_S * 1e3:.0f} ms windows over {a.seconds:g} s: window medians spread "
          f"{m.window_spread:.2f}× (slowest / fastest), SD of their log {m.window_sd:.1%} (noisy above "
          f"{NOISY_WINDOW_SD:.0%})")
    others = f"{m.other_cores:.2f} of {m.cores} cores" if m.other_cores is not None else "unknown (/proc/stat reads 0)"
    load = "unknown" if m.load_avg_1m is None else f"{m.load_avg_1m:.2f}"
    print(f"other processes: {others} (noisy above {NOISY_OTHER_CORES}); load average {load}")
    print("kernel: " + (", ".join(f"{k} {v}" for k, v in m.facts.items()) or "no frequency or SMT information "
                        "(common on virtual machines)"))
    print(m.line())
    return LOST if m.noisy else OK

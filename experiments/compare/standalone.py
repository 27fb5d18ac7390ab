"""Time two exported steps with their framework alone, taking turns: `python repro.py`.

A copy of this file sits beside `repro.json` (each side's label, framework, file, op, compile and threads) and the
two sides' exported programs (torch: `a.pt2`, `b.pt2` from torch.export; jax: `a.jax`, `b.jax`, serialized StableHLO
from jax.export, with their arguments in `a.npz`, `b.npz`). Each side runs in a process of its own, under
`--python-a` and `--python-b` (default: this interpreter; give two where the framework's version is what differs),
warmed up; then the sides take turns in bursts of about --burst-ms while the other waits in a read, so that the
machine's drift hits both alike. It prints each side's median step time and the ratio B/A (above 1: B is slower).
It imports only the framework and the standard library. Each framework's loader, `<name>_step(path, op, compiled,
threads)`, comes from its backend (experiments/measure/backends/<name>_script.py) and is written into this file
above its `main` (compare/upstream.py `script`).
"""
import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def serve(side: str, burst_s: float) -> None:
    """A side's process: warm up, say so, then answer each line on stdin with a burst's step times."""
    c = json.loads((HERE / "repro.json").read_text())["sides"][side]
    make = globals()[f"{c['framework']}_step"]  # the side's loader, below
    step = make(HERE / c["file"], c["op"], c["compile"], c["threads"])
    for _ in range(10):
        step()
    print("ready", flush=True)
    for _ in sys.stdin:
        times, end = [], time.perf_counter() + burst_s
        while not times or time.perf_counter() < end:
            start = time.perf_counter()
            step()
            times.append(time.perf_counter() - start)
        print(json.dumps(times), flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--python-a", default=sys.executable, help="side A's interpreter (default: this one)")
    p.add_argument("--python-b", default=sys.executable, help="side B's interpreter (default: this one)")
    p.add_argument("--rounds", type=int, default=30, help="bursts per side (default 30)")
    p.add_argument("--burst-ms", type=float, default=50.0, help="a burst's length (default 50)")
    p.add_argument("--serve", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.serve:
        return serve(a.serve, a.burst_ms / 1e3)
    sides = json.loads((HERE / "repro.json").read_text())["sides"]
    workers = {s: subprocess.Popen([python, __file__, "--serve", s, "--burst-ms", str(a.burst_ms)], text=True,
                                   stdin=subprocess.PIPE, stdout=subprocess.PIPE)
               for s, python in (("a", a.python_a), ("b", a.python_b))}
    for w in workers.values():
        if w.stdout.readline().strip() != "ready":
            sys.exit(f"a side failed to start: {w.args}")
    times, rounds = {s: [] for s in workers}, []
    for i in range(a.rounds):
        burst = {}
        for s in (("a", "b") if i % 2 == 0 else ("b", "a")):  # each side first every other round
            workers[s].stdin.write("burst\n")
            workers[s].stdin.flush()
            burst[s] = json.loads(workers[s].stdout.readline())
            times[s] += burst[s]
        rounds.append(statistics.median(burst["b"]) > statistics.median(burst["a"]))
    for w in workers.values():
        w.stdin.close()
        w.wait()
    median = {s: statistics.median(t) for s, t in times.items()}
    for s, t in times.items():
        print(f"{s.upper()} ({sides[s]['label']}): median {median[s] * 1e3:.4g} ms per step, {len(t)} steps")
    print(f"B/A: {median['b'] / median['a']:.3f} (above 1: B is slower); B slower in {sum(rounds)} of {a.rounds} "
          "rounds")


# the loaders of the sides' frameworks go here

if __name__ == "__main__":
    main()

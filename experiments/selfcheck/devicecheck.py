"""The accelerator's path end to end: `nnbench devicecheck [--device auto|tpu|gpu] [--bench quick] [--out DIR]`
(a few minutes; `nnbench gpucheck` is `--device gpu`).

On the machine's accelerator (a TPU, else a GPU; `--device` names one), each sweep into a fresh store: one README
cell (LeNet bs128, inference and a training step, jax and torch) synced and pipelined (`bench.sync`), seed 004's chain
at its own sizes in bf16 (n=10000, m=1000, depth 10; jit and eager, forward and grad; jax alone beside a TPU), and
on a GPU torch's CUDA graphs on LeNet. Checks that every run finished, each framework on the device it should take
(jax on the accelerator; torch on a GPU, or on the host's CPU beside a TPU), that each point was timed as asked, that
the device's memory was read and that no MFU reads above 100%; prints the points' medians, sync, MFU, peak and device
memory. Exits 1 if a check fails, 2 where the machine has no such accelerator. Never fakes a device run.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from experiments.common.child import run_to_end
from experiments.common.config import README_SWEEP
from experiments.common.devices import present
from experiments.common.errors import LOST, OK, BadInput
from experiments.common.frameworks import references, traits

# The sweeps, by name: their overrides, and the accelerators they run on. Parity is not what is checked here (its
# process runs on the CPU): it is off, for time.
SWEEPS = {
    "readme": ([*README_SWEEP, "batch_size=128", "bench.sync=synced,pipelined", "parity=false"], ("tpu", "gpu")),
    "seed004": (["experiment=seed004", "model.n=10000", "model.m=1000", "parity=false"], ("tpu", "gpu")),
    "cudagraphs": (["framework=torch", "framework.compile=true", "framework.compile_mode=reduce-overhead",
                    "model=lenet", "batch_size=32"], ("gpu",)),
}


# What the machine lacks, by --device.
NONE = {"auto": "no accelerator (no TPU on the PCI bus, no NVIDIA device node)", "tpu": "no TPU on the PCI bus",
        "gpu": "no NVIDIA GPU (no device node /dev/nvidia0)"}
# Where to run it instead, by --device.
WHERE = {"auto": "a TPU VM or a GPU machine", "tpu": "a TPU VM", "gpu": "a machine with an NVIDIA GPU"}


def accelerator(wanted: str) -> str:
    """The accelerator to check: `wanted`, or for auto the machine's (a TPU first); BadInput where there is none."""
    machine = present()
    found = [p for p in ("tpu", "gpu") if machine.has(p) and wanted in ("auto", p)]
    if not found:
        raise BadInput(f"this machine has {NONE[wanted]}: nothing was run; run it on {WHERE[wanted]}")
    return found[0]


def overrides(name: str, platform: str, bench: str) -> list[str]:
    """A sweep's command line beside the accelerator."""
    args = SWEEPS[name][0] + [f"bench={bench}"]
    if platform != "tpu":
        return args + [f"device={platform}"]
    if name == "seed004":  # torch would run the seed's sizes on the host's CPU: minutes a call
        return args + ["framework=jax", "device=tpu"]
    return args + ["device=auto"]  # jax takes the TPU, torch the host's CPU


def sweep(name: str, args: list[str], out: Path) -> tuple[int, Path]:
    """Run one sweep into its own store, its console shown as it goes; its exit code and its directory."""
    cwd = out / name
    cwd.mkdir(parents=True, exist_ok=True)
    print(f"\n## {name}: `python -m experiments.run -m {' '.join(args)}`", flush=True)
    t0 = time.perf_counter()
    r = run_to_end([sys.executable, "-m", "experiments.run", "-m", *args], cwd=cwd)
    print(f"## {name}: exit {r.returncode} in {time.perf_counter() - t0:.0f} s", flush=True)
    return r.returncode, cwd


def problems(points, platform: str) -> list[str]:
    """What is wrong with a sweep's point runs (a DataFrame of them): unfinished, on the wrong device, timed otherwise
    than asked, no device memory where the device is an accelerator, an MFU above 100%."""
    out = []
    for _, row in points.iterrows():
        name, fw = row["tags.mlflow.runName"], row["params.framework"]
        where, asked = traits(fw).beside[platform], row.get("params.config.bench.sync", "auto")
        if row["status"] != "FINISHED":
            out.append(f"{row['status']}: {name}: {row.get('tags.failure_reason', '')}"[:300])
            continue
        if not str(row["params.device"]).startswith(where):
            out.append(f"NOT ON THE {where.upper()}: {name} ran on {row['params.device']}")
        wanted = ("pipelined" if where != "cpu" else "synced") if asked == "auto" else asked
        if row["params.sync"] != wanted:
            out.append(f"TIMED {row['params.sync']}, NOT {wanted}: {name}")
        memory = [c for c in points if c.endswith("_device_peak_mem_bytes")]
        if where != "cpu" and all(row.get(c) != row.get(c) for c in memory):  # NaN: not read
            out.append(f"NO DEVICE MEMORY: {name}")
        out += [f"MFU ABOVE 100%: {name} {c}" for c in points if c.endswith("_mfu") and row.get(c, 0) > 1]
    return out


def check(name: str, platform: str, bench: str, out: Path) -> bool:
    """One sweep on the accelerator, into its own store, and its table: did every run finish, as it should?"""
    from experiments.report import tables  # pandas and mlflow are slow to import: only once a sweep ran
    from experiments.store import tracking

    code, cwd = sweep(name, overrides(name, platform, bench), out)
    if code:
        return False
    runs = tracking.Store(f"sqlite:///{cwd}/mlruns/mlflow.db").search("nnbench")
    points = runs[runs["params.model"].notna()]
    wrong = problems(points, platform)
    print("\n".join(wrong))
    t = tables.tidy(points)
    view = t.assign(median_ms=t["median_s"] * 1e3, mfu_pct=t["mfu"] * 100,
                    device_mem_MiB=t.get("device_peak_mem_bytes", t["median_s"] * float("nan")) / 2**20)
    cols = ["model", "op", "batch_size", "variant", "device", "device_name", "sync", "median_ms", "achieved_tflops",
            "peak_tflops", "mfu_pct", "device_mem_MiB", "compiles"]
    print(view[[c for c in cols if c in view]].to_markdown(index=False, floatfmt=".4g"))
    for source in sorted(set(points.get("tags.peak_source", []).dropna())):
        print(f"peak: {source}")
    if name == "readme":
        on = next(f for f in references() if f.beside[platform] != "cpu")  # the first that measures on the device
        wrong += bare(t[t["device"].astype(str).str.startswith(on.beside[platform])], on.name, platform)
    return not wrong and not points.empty


# How far the harness may read from a bare loop timing the same step the same way, on the device.
BARE_TOLERANCE = 0.05


def bare(timed, framework: str, platform: str) -> list[str]:
    """The sweep's points of one framework against a bare loop (`bareloop`, in a process of its own once the sweep has let the
    chip go) that times each op with the same sync and calls per block; a line per op and sync, and a problem where
    they read more than BARE_TOLERANCE apart."""
    if timed.empty:
        return []
    row = timed.iloc[0]
    asked = [f"{r.op}:{r.sync}:{int(r.calls_per_block)}" for r in timed.itertuples()]
    r = subprocess.run([sys.executable, "-m", "experiments.selfcheck.bareloop", framework, platform, str(row["model"]),
                        str(row["batch_size"]), *asked], capture_output=True, text=True)
    if r.returncode:
        return [f"BARE LOOP FAILED: {(r.stderr.strip().splitlines() or ['exit ' + str(r.returncode)])[-1]}"]
    loops = {(d["op"], d["sync"]): d["median_s"] for d in map(json.loads, r.stdout.splitlines())}
    out = []
    for x in timed.itertuples():
        ratio = x.median_s / loops[(x.op, x.sync)]
        print(f"bare loop: {x.model} bs{x.batch_size} {x.op} {x.sync} ({x.calls_per_block} calls a block): nnbench "
              f"{x.median_s * 1e3:.4g} ms, bare {loops[(x.op, x.sync)] * 1e3:.4g} ms, nnbench/bare {ratio:.3f}")
        if abs(ratio - 1) > BARE_TOLERANCE:
            out.append(f"HARNESS {ratio:.3f}× A BARE LOOP: {x.op} {x.sync}")
    return out


def add_arguments(p: argparse.ArgumentParser, device: str = "auto") -> None:
    p.add_argument("--device", choices=("auto", "tpu", "gpu"), default=device,
                   help="the accelerator to check (default %(default)s: a TPU, else a GPU)")
    p.add_argument("--bench", default="quick", help="bench config for every sweep (default %(default)s)")
    p.add_argument("--only", choices=sorted(SWEEPS), action="append", help="run only these sweeps")
    p.add_argument("--out", type=Path, help="keep the stores and logs here (default: a temporary directory)")


def run(a: argparse.Namespace) -> int:
    platform = accelerator(a.device)
    out = a.out or Path(tempfile.mkdtemp(prefix=f"nnbench-devicecheck-{platform}-"))
    names = [n for n in (a.only or SWEEPS) if platform in SWEEPS[n][1]]
    ok = [check(name, platform, a.bench, out) for name in names]
    print(f"\ndevicecheck: {sum(ok)} of {len(ok)} sweeps on the {platform.upper()} finished every point where it "
          f"should run (stores in {out})")
    return OK if ok and all(ok) else LOST

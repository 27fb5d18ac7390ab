"""The GPU path end to end: `nnbench gpucheck [--bench quick] [--out DIR]` (about 4 min on one H200).

Runs, with `device=gpu`, the README sweep, seed 004 at its original sizes (n=10000, m=1000, bf16; eager and
compiled, forward and grad) and torch's CUDA-graphs mode on LeNet, each into a fresh store; checks that every
run says it ran on the GPU (`params.device` cuda:N) and finished; prints medians, MFU and peak memory.
Exits 1 if any check fails, 2 if no GPU is visible. Never fakes a GPU run.
"""
from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from experiments.common.child import run_to_end
from experiments.common.config import README_SWEEP
from experiments.common.errors import LOST, OK, BadInput

SWEEPS = {
    "readme": [*README_SWEEP],
    "seed004": ["experiment=seed004", "model.n=10000", "model.m=1000"],
    "cudagraphs": ["framework=torch", "framework.compile=true", "framework.compile_mode=reduce-overhead",
                   "model=lenet", "batch_size=32"],
}


def gpu_visible() -> bool:
    smi = shutil.which("nvidia-smi")
    r = subprocess.run([smi, "-L"], capture_output=True, text=True) if smi else None
    return bool(r and r.returncode == 0 and "GPU" in r.stdout)


def check(name: str, args: list[str], bench: str, out: Path) -> bool:
    """Run one sweep on the GPU into its own store and print its table: did every run finish, on the GPU?"""
    from experiments.report import tables  # pandas and mlflow are slow to import: only once a sweep ran
    from experiments.store import tracking

    cwd = out / name
    cwd.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    r = run_to_end([sys.executable, "-m", "experiments.run", "-m", *args, "device=gpu", f"bench={bench}"],
                   cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    (cwd / "sweep.log").write_text(r.stdout + r.stderr)
    print(f"\n## {name}: `{' '.join(args)} device=gpu bench={bench}` exit {r.returncode} in "
          f"{time.perf_counter() - t0:.0f} s")
    if r.returncode:
        print("\n".join((r.stdout + r.stderr).strip().splitlines()[-15:]))
        return False
    runs = tracking.Store(f"sqlite:///{cwd}/mlruns/mlflow.db").search("nnbench")
    points = runs[runs["params.model"].notna()]
    off_gpu = points[~points["params.device"].astype(str).str.startswith("cuda")]
    unfinished = points[points["status"] != "FINISHED"]
    for _, row in off_gpu.iterrows():
        print(f"NOT ON THE GPU: {row['tags.mlflow.runName']} ran on {row['params.device']}")
    for _, row in unfinished.iterrows():
        print(f"{row['status']}: {row['tags.mlflow.runName']}: {row.get('tags.failure_reason', '')}"[:300])
    t = tables.tidy(points)
    view = t.assign(median_ms=t["median_s"] * 1e3, mfu_pct=t["mfu"] * 100, mfu_vendor_pct=t["mfu_vendor"] * 100,
                    peak_mem_MiB=t["peak_mem_bytes"] / 2**20)
    cols = ["model", "op", "batch_size", "variant", "device_name", "median_ms", "achieved_tflops", "peak_tflops",
            "mfu_pct", "mfu_vendor_pct", "peak_mem_MiB", "compiles"]
    print(view[[c for c in cols if c in view]].to_markdown(index=False, floatfmt=".4g"))
    return off_gpu.empty and unfinished.empty and not points.empty


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--bench", default="quick", help="bench config for every sweep (default %(default)s)")
    p.add_argument("--only", choices=sorted(SWEEPS), action="append", help="run only these sweeps")
    p.add_argument("--out", type=Path, help="keep the stores and logs here (default: a temporary directory)")


def run(a: argparse.Namespace) -> int:
    if not gpu_visible():
        raise BadInput("no GPU visible (nvidia-smi -L lists none): nothing was run; run it on a machine with a GPU")
    out = a.out or Path(tempfile.mkdtemp(prefix="nnbench-gpucheck-"))
    ok = [check(name, SWEEPS[name], a.bench, out) for name in (a.only or SWEEPS)]
    print(f"\ngpucheck: {sum(ok)} of {len(ok)} sweeps ran every point on the GPU and finished (stores in {out})")
    return OK if all(ok) else LOST

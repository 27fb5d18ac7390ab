"""What the hardware can do, for MFU: one peak per machine, device and precision, the same for every framework.

MFU is a fraction of what the hardware can do, and the hardware doesn't change with the framework. So the peak of a
known accelerator is its data sheet's dense peak (VENDOR_TFLOPS), beside what a large matmul sustained there;
elsewhere (a CPU) it is the best of what a large n×n matmul sustains through each framework the sweep measures, at
the run's precision, with the framework's own threads (each calibrated once per sweep by the first worker of that
framework, inside the worker, which holds the device: a TPU chip takes one process at a time; cached in the sweep
dir): on one 2-core CPU in the same minute a jax matmul sustained 0.123 TFLOP/s and a torch one 0.066, so each
framework's own peak made a torch step read "111% MFU" beside jax's 54%. And where a point's rate is above the peak
after all, the peak is raised to it, and says so (`raised`): MFU never reads above 100%.
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

import numpy as np

from experiments.common.protocol import Budget, Json
from experiments.measure.flops import achieved_tflops
from experiments.measure.timing import measure

# Dense peaks in TFLOP/s from the vendors' data sheets, the more specific names first (a device's name holds them):
# GPUs' tensor cores (SXM unless the name says otherwise; fp32 is plain FP32, tf32 is fp32 with TF32 allowed, fp64
# the FP64 tensor-core (DGEMM) peak), and TPUs' matrix units in bf16 (Google's TPU pages: v5e 197, v5p 459, v4 275,
# v6e 918). A TPU's fp32 matmul is several bf16 passes (its precision policy `fp32/bf16xN`: jax's highest takes 6,
# high 3), so its fp32 peak is the bf16 one over N: a TPU v5e at highest, 197/6 = 32.8 (an 8192² matmul read 30.6).
VENDOR_TFLOPS = {
    "H200 NVL": {"fp64": 60, "fp32": 60, "tf32": 418, "bf16": 835, "fp16": 835},
    "H200": {"fp64": 67, "fp32": 67, "tf32": 495, "bf16": 989, "fp16": 989},
    "H100 PCIe": {"fp64": 51, "fp32": 51, "tf32": 378, "bf16": 756, "fp16": 756},
    "H100": {"fp64": 67, "fp32": 67, "tf32": 495, "bf16": 989, "fp16": 989},
    "A100": {"fp64": 19.5, "fp32": 19.5, "tf32": 156, "bf16": 312, "fp16": 312},
    "V100-PCIE": {"fp64": 7, "fp32": 14, "fp16": 112},
    "V100": {"fp64": 7.8, "fp32": 15.7, "fp16": 125},
    "TPU v5 lite": {"bf16": 197},  # TPU v5e
    "TPU v6 lite": {"bf16": 918},  # TPU v6e (Trillium)
    "TPU v5": {"bf16": 459},  # TPU v5p
    "TPU v4": {"bf16": 275},
}
CALIBRATION = Budget(warmup_s=0.1, warmup_calls=2, min_samples=5, max_samples=100, min_time_s=0.3, max_time_s=1.0,
                     target_rel_ci=0.02, min_block_s=0.0, between_k=0.0, between_prior=0.0, sync="synced")


def vendor_peak(device_name: str, precision_policy: str) -> tuple[float, str] | None:
    """The data-sheet peak of a known accelerator at a precision policy such as `bf16/tf32-off` or `fp32/bf16x6`,
    and how it is read (`H100 at bf16/tf32-off: 989 TFLOP/s`); None if unknown."""
    precision, _, policy = precision_policy.partition("/")
    for name, peaks in VENDOR_TFLOPS.items():
        if name.lower() not in device_name.lower():
            continue
        if precision == "fp32" and policy.startswith("bf16x") and "bf16" in peaks:  # a TPU's fp32: bf16 passes
            passes = int(policy.removeprefix("bf16x"))
            return peaks["bf16"] / passes, (f"{device_name} at {precision_policy}: {peaks['bf16']:g} bf16 TFLOP/s "
                                            f"over {passes} passes, {peaks['bf16'] / passes:.3g} TFLOP/s")
        key = "tf32" if precision == "fp32" and policy == "tf32-on" else precision
        return (peaks[key], f"{device_name} at {precision_policy}: {peaks[key]:g} TFLOP/s") if key in peaks else None
    return None


def vendor_tflops(device_name: str, precision_policy: str) -> float | None:
    """The data-sheet peak alone (`vendor_peak`); None if unknown."""
    known = vendor_peak(device_name, precision_policy)
    return known[0] if known else None


def within(budget: Budget) -> Budget:
    """CALIBRATION, cut to the sweep's own budget where that is shorter: a rough sweep (bench=quick) gets a rough
    peak as quickly as its points, and its first worker of each framework is not held a second over it."""
    c = CALIBRATION
    return replace(c, warmup_s=min(c.warmup_s, budget.warmup_s), warmup_calls=min(c.warmup_calls, budget.warmup_calls),
                   min_samples=min(c.min_samples, budget.min_samples), min_time_s=min(c.min_time_s, budget.min_time_s),
                   max_time_s=min(c.max_time_s, budget.max_time_s),
                   target_rel_ci=max(c.target_rel_ci, budget.target_rel_ci))


def calibrate(matmul: Callable[[int], object], limit: int = 16384, budget: Budget = CALIBRATION) -> float:
    """TFLOP/s that an n×n matmul sustains: n doubles from 256 until one call takes a 15th of the budget's min_time_s
    (CALIBRATION's 0.3 s: 20 ms; bench=quick's 0.05 s: 3.3 ms) or n reaches `limit`, then it is timed within
    `budget` (`within`: at most CALIBRATION). A CPU's matmul sustains its rate from about 1 ms a call on."""
    n, enough = 256, budget.min_time_s / 15
    while True:
        step = matmul(n)
        step.sync(step.fn())  # the compile, if any
        t0 = time.perf_counter()
        step.sync(step.fn())
        if time.perf_counter() - t0 >= enough or n >= limit:
            break
        n *= 2
    m = measure(step.fn, step.sync, budget)
    return achieved_tflops(2 * n**3, float(np.median(m.samples_s)))


def cached(path: Path, key: str, compute: Callable[[], float]) -> float:
    """The value for `key` in the JSON file at `path`, computed and added (atomically) the first time."""
    if key in (known := read(path)):
        return known[key]
    value = compute()
    write(path, key, value)
    return value


def read(path: Path) -> dict[str, float]:
    return json.loads(path.read_text()) if path.exists() else {}


def write(path: Path, key: str, value: float) -> None:
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(read(path) | {key: value}))  # read again: another process may have added its own
    os.replace(tmp, path)


def where(env: dict[str, str]) -> str:
    """What one peak is for: the machine, the device and the precision (`host|cpu|fp32/tf32-off`)."""
    return "|".join(env.get(k, "?") for k in ("host", "device_name", "precision_policy"))


def calibrated(path: Path, env: dict[str, str], framework: str, compute: Callable[[], float]) -> float:
    """This framework's matmul rate on this machine, device and precision, calibrated once per sweep (`path`)."""
    return cached(path, f"{where(env)}|{framework}", compute)


@dataclass(frozen=True)
class Peak(Json):
    """The peak MFU divides by, and where it came from (what people read beside every MFU)."""

    tflops: float
    source: str
    measured: float | None = None  # beside a data sheet's: the best rate a large matmul sustained there


def peak(path: Path | None, env: dict[str, str]) -> Peak | None:
    """The peak of this machine, device and precision: a known accelerator's data sheet (with the matmul rate
    measured beside it); else the best rate any framework's calibration in the sweep reached (or a measured rate
    that passed it, `raised`); None where none is known."""
    prefix = where(env) + "|"
    rates = {k.removeprefix(prefix): v for k, v in (read(path) if path else {}).items() if k.startswith(prefix)}
    sheet = vendor_peak(env.get("device_name", ""), env.get("precision_policy", ""))
    if sheet and not any(k.startswith("raised ") for k in rates):
        best = max(rates, key=rates.get, default=None)
        beside = f"; a large matmul through {best} sustained {rates[best]:.3g} TFLOP/s" if best else ""
        return Peak(sheet[0], f"data sheet: {sheet[1]}{beside}", rates[best] if best else None)
    if not rates:
        return None
    best = max(rates, key=rates.get)
    each = ", ".join(f"{fw} {v:.3g}" for fw, v in sorted(rates.items()) if fw != best)
    if best.startswith("raised "):
        return Peak(rates[best], best.removeprefix("raised ") + (f" (calibrated: {each})" if each else ""))
    return Peak(rates[best], f"calibrated: a large matmul through {best} sustained {rates[best]:.3g} TFLOP/s at "
                             f"{env.get('precision_policy', '?')}, the framework's own threads"
                             + (f" (also: {each})" if each else ""))


def raised(path: Path | None, env: dict[str, str], tflops: float, what: str) -> Peak:
    """A measured rate above the peak becomes the peak (kept for the sweep's later points), and says so."""
    source = f"raised to {what}'s {tflops:.3g} TFLOP/s, above every calibration"
    if path is None:
        return Peak(tflops, source)
    write(path, f"{where(env)}|raised {source}", tflops)
    return peak(path, env)

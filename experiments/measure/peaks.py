"""What the hardware can do, for MFU: a calibrated matmul peak per environment, and vendors' dense peaks.

The calibrated peak is what a large n×n matmul sustains through the measuring framework at the run's precision
(median per call, n doubled until a call takes 20 ms): `<op>_mfu` = achieved / this. It is measured once per
sweep and environment fingerprint and cached in the sweep dir, so every process of the sweep shares it.
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Callable

import numpy as np

from experiments.common.protocol import Budget
from experiments.measure.flops import achieved_tflops
from experiments.measure.timing import measure

# Dense tensor-core peaks in TFLOP/s from the vendors' data sheets (SXM unless the name says otherwise);
# fp32 is plain FP32, tf32 is fp32 with TF32 allowed, fp64 is the FP64 tensor-core (DGEMM) peak.
VENDOR_TFLOPS = {
    "H200 NVL": {"fp64": 60, "fp32": 60, "tf32": 418, "bf16": 835, "fp16": 835},
    "H200": {"fp64": 67, "fp32": 67, "tf32": 495, "bf16": 989, "fp16": 989},
    "H100 PCIe": {"fp64": 51, "fp32": 51, "tf32": 378, "bf16": 756, "fp16": 756},
    "H100": {"fp64": 67, "fp32": 67, "tf32": 495, "bf16": 989, "fp16": 989},
    "A100": {"fp64": 19.5, "fp32": 19.5, "tf32": 156, "bf16": 312, "fp16": 312},
    "V100-PCIE": {"fp64": 7, "fp32": 14, "fp16": 112},
    "V100": {"fp64": 7.8, "fp32": 15.7, "fp16": 125},
}
CALIBRATION = Budget(warmup_s=0.1, warmup_calls=2, min_samples=5, max_samples=100, min_time_s=0.3, max_time_s=1.0,
                     target_rel_ci=0.02, min_block_s=0.0, between_k=0.0, between_prior=0.0)


def vendor_tflops(device_name: str, precision_policy: str) -> float | None:
    """The data-sheet peak of a known GPU at a precision policy such as `bf16/tf32-off`; None if unknown."""
    precision, _, tf32 = precision_policy.partition("/")
    key = "tf32" if precision == "fp32" and tf32 == "tf32-on" else precision
    for name, peaks in VENDOR_TFLOPS.items():  # the more specific names come first
        if name.lower() in device_name.lower():
            return peaks.get(key)
    return None


def calibrate(matmul: Callable[[int], object], limit: int = 16384) -> float:
    """TFLOP/s that an n×n matmul sustains: n doubles from 256 until one call takes 20 ms (or reaches `limit`)."""
    n = 256
    while True:
        step = matmul(n)
        step.sync(step.fn())  # the compile, if any
        t0 = time.perf_counter()
        step.sync(step.fn())
        if time.perf_counter() - t0 >= 0.02 or n >= limit:
            break
        n *= 2
    m = measure(step.fn, step.sync, CALIBRATION)
    return achieved_tflops(2 * n**3, float(np.median(m.samples_s)))


def cached(path: Path, key: str, compute: Callable[[], float]) -> float:
    """The value for `key` in the JSON file at `path`, computed and added (atomically) the first time."""
    def read() -> dict[str, float]:
        return json.loads(path.read_text()) if path.exists() else {}

    if key in (known := read()):
        return known[key]
    value = compute()
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(read() | {key: value}))  # read again: another process may have added its own
    os.replace(tmp, path)
    return value

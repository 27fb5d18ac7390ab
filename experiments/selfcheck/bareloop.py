"""A bare loop over the step nnbench times: `python -m experiments.selfcheck.bareloop FRAMEWORK DEVICE MODEL BATCH
OP:SYNC:BLOCK ...` builds each op as a worker does (`backends`), then times it with nothing around it, synced (every
call waits for its result) or pipelined (BLOCK calls dispatched, one wait), blocks of BLOCK calls for about a second,
and prints one JSON line per op and sync: its median seconds per call. `nnbench devicecheck` holds a sweep's medians
against it: the harness must read what a plain loop reads, on the device the loop runs on. Runs on the worker side,
alone on the device (one process at a time may hold a TPU chip).
"""
from __future__ import annotations

import dataclasses
import json
import statistics
import sys
import time

import models
from experiments.common.frameworks import traits
from experiments.measure.backends import load

# Seconds of blocks per op and sync, after as many of warm-up.
SECONDS = 1.0


def blocks(fn, sync, block: int, pipelined: bool) -> list[float]:
    """Seconds per call of each block: BLOCK calls, each synced, or dispatched back to back and the last one synced."""
    out, end = [], time.perf_counter() + SECONDS
    while time.perf_counter() < end or len(out) < 5:
        t0 = time.perf_counter()
        for _ in range(block):
            y = fn()
            if not pipelined:
                sync(y)
        sync(y)
        out.append((time.perf_counter() - t0) / block)
    return out


def main(framework: str, device: str, model: str, batch: str, *asked: str) -> int:
    backend = load(framework)
    backend.configure(dataclasses.replace(traits(framework).smoke, device=device))  # the framework's default set-up
    spec = models.load(model)
    for item in asked:
        op, sync_policy, block = item.split(":")
        step = backend.prepare(spec, op, int(batch), 0)
        blocks(step.fn, step.sync, int(block), sync_policy == "pipelined")  # the first call and the warm-up
        median = statistics.median(blocks(step.fn, step.sync, int(block), sync_policy == "pipelined"))
        print(json.dumps({"op": op, "sync": sync_policy, "block": int(block), "median_s": median}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))

"""The GPU path end to end: `nnbench gpucheck [--bench quick] [--out DIR]`, which is `nnbench devicecheck --device
gpu` (its name from before TPUs): the README cell synced and pipelined, seed 004 at its own sizes in bf16, torch's CUDA
graphs; every run finished on the GPU. Exits 1 if any check fails, 2 if the machine has no GPU."""
from __future__ import annotations

import argparse

from experiments.selfcheck import devicecheck


def add_arguments(p: argparse.ArgumentParser) -> None:
    devicecheck.add_arguments(p, device="gpu")


def run(a: argparse.Namespace) -> int:
    return devicecheck.run(a)

"""What the worker reads around its sampling, besides the clock: its page faults and CPU time, the machine's busy
CPU time (other processes' use, in cores), and its resident memory. Linux /proc and getrusage; runs in the worker.

Every /proc reading is optional: a sandbox (gVisor) shows a /proc/self/status without VmHWM, a /proc/stat of zeros
and a load average of 0.00 on a busy machine. What can't be read is unknown (None, and no metric), never a crash
and never "noisy".
"""
from __future__ import annotations

import math
import os
import resource
import time
from pathlib import Path

import psutil

from experiments.common.frameworks import names, traits


def cpu_times():
    """The machine's CPU times (psutil's), or None where the kernel's counters are hidden: every field zero, as a
    gVisor sandbox's /proc/stat reads (it made an idle 13-core machine read "12.07 cores of other processes")."""
    try:
        times = psutil.cpu_times()
    except (OSError, psutil.Error, ValueError):
        return None
    return times if sum(times) > 0 else None


CPUS = len(psutil.cpu_times(percpu=True)) or os.cpu_count() or 1  # the CPUs that /proc/stat's total adds up


def meter() -> dict[str, float]:
    """Read before and after the sampling: this process's page faults and CPU time, the machine's busy CPU time
    (left out where the machine hides it: `cpu_times`).

    Busy is every CPU's time less its idle time. The kernel measures idle time exactly but charges user and system
    time by sampling at its ticks, which over-counts a process that sleeps between short calls: beside one such
    process (0.5 ms busy, 0.5 ms asleep, for 1.5 s) a quiet 2-core machine read 0.10-0.25 cores of other processes'
    use by ticks and 0.05 by idle time, and a busy loop beside it read about 1.0 either way."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    cpu, wall = cpu_times(), time.monotonic()
    out = {"minor_faults": own.ru_minflt, "own_cpu_s": own.ru_utime + own.ru_stime, "wall_s": wall}
    return out | ({"busy_cpu_s": CPUS * wall - cpu.idle - cpu.iowait} if cpu is not None else {})


def background_cores(change: dict[str, float]) -> float | None:
    """Other processes' CPU use, in cores, from the change of `meter()` over a while (the kernel reports idle time in
    10 ms units: over 20 ms that is ±1 core, over 1.5 s ±0.01); None where the machine hides its busy time."""
    if "busy_cpu_s" not in change or change["wall_s"] <= 0:
        return None
    return max(0.0, (change["busy_cpu_s"] - change["own_cpu_s"]) / change["wall_s"])


def load_average() -> float | None:
    """The machine's 1-minute load average; None where it can't be known: CPU counters that read zeros (a sandbox's
    /proc then shows a load of 0.00 on a busy machine), or a /proc/loadavg that is missing or counts no process."""
    try:
        return first_load(Path("/proc/loadavg").read_text()) if cpu_times() is not None else None
    except OSError:
        return None


def first_load(loadavg: str) -> float | None:
    """/proc/loadavg's 1-minute figure (`0.52 0.58 0.59 2/412 9876`); None where it counts no process at all."""
    try:
        one, _, _, processes, *_ = loadavg.split()
        return float(one) if int(processes.split("/")[1]) > 0 else None
    except (ValueError, IndexError):
        return None


def status_fields(text: str) -> dict[str, int]:
    """/proc/self/status's sizes (`VmRSS:  1234 kB`) in bytes, by name; lines of another shape are left out."""
    out = {}
    for line in text.splitlines():
        name, _, value = line.partition(":")
        parts = value.split()
        if len(parts) == 2 and parts[1] == "kB" and parts[0].isdigit():
            out[name] = int(parts[0]) * 1024
    return out


def status() -> dict[str, int]:
    try:
        return status_fields(Path("/proc/self/status").read_text())
    except OSError:
        return {}


def resident(fields: dict[str, int] | None = None) -> tuple[int, int]:
    """This process's resident set and its high-water mark, in bytes: VmRSS and VmHWM of /proc/self/status
    (`status_fields`), else psutil's resident set and getrusage's high-water mark (which nothing resets)."""
    fields = status() if fields is None else fields
    rss = fields.get("VmRSS") or psutil.Process().memory_info().rss
    return rss, fields.get("VmHWM") or resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def reset_high_water() -> bool:
    """Set the high-water mark to the current resident set (Linux 4.0+); False where that is refused, or where there
    is no VmHWM to reset (`resident` then reads getrusage's, which stays)."""
    if "VmHWM" not in status():
        return False
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


# An op's intra-op threads are oversubscribed when they outnumber the cores free by more than this (the noisy
# guard's bound). On 2 cores, one busy program beside torch's 2 OpenMP threads made LeNet bs32
# inference read 132 ms against 1.3 ms: every parallel region waits for the thread whose core is taken.
SPARE_CORES = 0.2


def threads_setting(framework: str) -> str:
    """What sets a framework's intra-op threads (its `Traits.threads`), for the hint."""
    return traits(framework).threads if framework in names() else "the intra-op threads"


def oversubscription(framework: str, threads: int | None, cores: int, other_cores: float | None,
                     machine_cores: int | None = None) -> str | None:
    """Why and what to set, where the op's `threads` outnumbered the cores free while it ran; None where they didn't.
    Free: the `cores` it may run on, or what other processes left of the machine's `machine_cores` (`other_cores`
    is their use over the whole machine; None where the machine hides it: then only the cores count), whichever is
    fewer."""
    machine = machine_cores or cores
    free = min(cores, machine - (other_cores or 0.0))
    if threads is None or threads <= free + SPARE_CORES:
        return None
    fewer = max(1, math.floor(free + SPARE_CORES))
    setting = f"set {threads_setting(framework)} to {fewer}, or " if fewer < threads else ""
    if other_cores is None:
        return f"{threads} intra-op threads on {cores} cores: {setting.removesuffix(', or ') or 'use fewer threads'}"
    return (f"{threads} intra-op threads on {cores} cores while other processes used {other_cores:.2f} of the "
            f"machine's {machine}: {setting}close the other program")

"""What the worker reads around its sampling, besides the clock: its page faults and CPU time, the machine's busy
CPU time (other processes' use, in cores), and its resident memory. Linux /proc and getrusage; runs in the worker."""
from __future__ import annotations

import math
import resource
import time
from pathlib import Path

import psutil


CPUS = len(psutil.cpu_times(percpu=True))  # the CPUs that /proc/stat's total adds up


def meter() -> dict[str, float]:
    """Read before and after the sampling: this process's page faults and CPU time, the machine's busy CPU time.

    Busy is every CPU's time less its idle time. The kernel measures idle time exactly but charges user and system
    time by sampling at its ticks, which over-counts a process that sleeps between short calls: beside one such
    process (0.5 ms busy, 0.5 ms asleep, for 1.5 s) a quiet 2-core machine read 0.10-0.25 cores of other processes'
    use by ticks and 0.05 by idle time, and a busy loop beside it read about 1.0 either way."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    cpu, wall = psutil.cpu_times(), time.monotonic()
    return {"minor_faults": own.ru_minflt, "own_cpu_s": own.ru_utime + own.ru_stime,
            "busy_cpu_s": CPUS * wall - cpu.idle - cpu.iowait, "wall_s": wall}


def background_cores(change: dict[str, float]) -> float:
    """Other processes' CPU use, in cores, from the change of `meter()` over a while (the kernel reports idle time in
    10 ms units: over 20 ms that is ±1 core, over 1.5 s ±0.01)."""
    return max(0.0, (change["busy_cpu_s"] - change["own_cpu_s"]) / change["wall_s"])


def resident() -> tuple[int, int]:
    """This process's resident set and its high-water mark, in bytes (Linux /proc)."""
    status = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines())
    return tuple(int(status[k].split()[0]) * 1024 for k in ("VmRSS", "VmHWM"))


def reset_high_water() -> bool:
    """Set the high-water mark to the current resident set (Linux 4.0+); False where that is refused."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


# An op's intra-op threads are oversubscribed when they outnumber the cores free by more than this (the noisy
# guard's bound). On 2 cores, one busy program beside torch's 2 OpenMP threads made LeNet bs32
# inference read 132 ms against 1.3 ms: every parallel region waits for the thread whose core is taken.
SPARE_CORES = 0.2
# What sets each framework's intra-op threads, for the hint.
THREADS_SETTING = {"torch": "torch's intra-op threads (framework.threads, torch.set_num_threads)",
                   "jax": "XLA's CPU threads (framework.threads, which runs the worker on that many cores)"}


def oversubscription(framework: str, threads: int | None, cores: int, other_cores: float,
                     machine_cores: int | None = None) -> str | None:
    """Why and what to set, where the op's `threads` outnumbered the cores free while it ran; None where they didn't.
    Free: the `cores` it may run on, or what other processes left of the machine's `machine_cores` (`other_cores`
    is their use over the whole machine), whichever is fewer."""
    machine = machine_cores or cores
    free = min(cores, machine - other_cores)
    if threads is None or threads <= free + SPARE_CORES:
        return None
    fewer = max(1, math.floor(free + SPARE_CORES))
    setting = f"set {THREADS_SETTING.get(framework, 'the intra-op threads')} to {fewer}, or " if fewer < threads else ""
    return (f"{threads} intra-op threads on {cores} cores while other processes used {other_cores:.2f} of the "
            f"machine's {machine}: {setting}close the other program")

"""The machine's own noise, before anything is measured on it (pyperf's `system` checks, in the spirit): a fixed
loop timed in short windows, whose window-to-window spread no stop rule can beat, and the facts that explain it
(CPU governor and frequency, SMT, load, other processes on our cores). Framework-free; `nnbench check` prints it,
and each sweep runs it once, in its launching process, before its first job.
"""
from __future__ import annotations

import math
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import psutil

from experiments.measure.meter import background_cores, load_average, meter

WINDOW_S = 0.2  # one window: a second-long plateau (seen here) spans several, so they show it
UNIT_S = 0.002  # one timed unit of the fixed loop
# Above these the machine itself limits precision: a fixed loop's windows differ by more than 5% (SD of their log
# medians), or other processes use a fifth of a core beside us.
NOISY_WINDOW_SD = 0.05
NOISY_OTHER_CORES = 0.2


@dataclass
class MachineCheck:
    """What the check read; numbers become the sweep's metrics, words its tags."""

    window_sd: float  # SD of the log of the windows' median unit times: the machine's own drift
    window_spread: float  # slowest window's median over the fastest one's
    other_cores: float | None  # other processes' CPU use on this machine during the check, in cores (None: hidden)
    load_avg_1m: float | None  # None: the machine doesn't show it (meter.load_average)
    cores: int  # the cores this process may run on
    facts: dict[str, str] = field(default_factory=dict)  # governor, frequency, SMT

    @property
    def noisy(self) -> bool:
        return self.window_sd > NOISY_WINDOW_SD or (self.other_cores or 0.0) > NOISY_OTHER_CORES

    def metrics(self) -> dict[str, float]:
        return {f"machine_{k}": float(v) for k, v in asdict(self).items() if isinstance(v, (int, float))}

    def line(self) -> str:
        """One line for the console, saying plainly when the machine itself limits precision."""
        others = ("other processes' CPU use unknown (this machine's /proc/stat reads zeros)"
                  if self.other_cores is None else f"other processes used {self.other_cores:.2f} of {self.cores} cores")
        load = "unknown" if self.load_avg_1m is None else f"{self.load_avg_1m:.2f}"
        what = (f"a fixed loop's {WINDOW_S * 1e3:.0f} ms windows spread {self.window_spread:.2f}× "
                f"(SD {self.window_sd:.1%}), {others}, load {load}")
        if not self.noisy:
            return f"machine check: quiet: {what}"
        return (f"machine check: NOISY: {what}: this machine itself limits precision to about ±{self.window_sd:.0%} "
                "per process; expect wide intervals (close other programs, or measure on a quiet machine)")


def unit(n: int) -> float:
    """A fixed amount of pure-Python work (no allocation, no library call): its time is the machine's."""
    acc = 0
    for i in range(n):
        acc ^= i * 2654435761 & 0xFFFF
    return acc


def calibrate() -> int:
    """Loop iterations that take about UNIT_S."""
    n = 1000
    while True:
        t0 = time.perf_counter()
        unit(n)
        if (dt := time.perf_counter() - t0) >= UNIT_S / 4:
            return max(1, int(n * UNIT_S / dt))
        n *= 4


def facts() -> dict[str, str]:
    """What the kernel says of frequency scaling and SMT (absent files, as on many VMs, are left out)."""
    out = {}
    cpu = Path("/sys/devices/system/cpu")
    for name, path in (("governor", "cpu0/cpufreq/scaling_governor"), ("smt", "smt/active"),
                       ("max_mhz", "cpu0/cpufreq/cpuinfo_max_freq")):
        try:
            value = (cpu / path).read_text().strip()
        except OSError:
            continue
        out[name] = str(int(value) // 1000) if name == "max_mhz" else value
    try:
        freq = psutil.cpu_freq()
    except (OSError, psutil.Error, NotImplementedError):  # a sandbox without /sys's cpufreq
        freq = None
    if freq and freq.current:
        out["mhz"] = f"{freq.current:.0f}"
    return out


def check(duration_s: float = 2.0) -> MachineCheck:
    """Time the fixed loop back to back for `duration_s`, in windows; read what else ran meanwhile."""
    n = calibrate()
    before = meter()
    start = wall = time.perf_counter()
    windows: list[float] = []
    while wall - start < duration_s:
        units, end = [], wall + WINDOW_S
        while (t0 := time.perf_counter()) < end:
            unit(n)
            units.append(time.perf_counter() - t0)
        windows.append(float(np.median(units)))
        wall = time.perf_counter()
    after = meter()
    logs = np.log(windows)
    return MachineCheck(window_sd=float(np.std(logs, ddof=1)) if len(windows) > 1 else 0.0,
                        window_spread=max(windows) / min(windows),
                        other_cores=background_cores({k: after[k] - before[k] for k in after}),
                        load_avg_1m=load_average(),
                        cores=len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
                        facts=facts())


def prior(result: MachineCheck | None, floor: float) -> float:
    """The stop rule's spread between processes before two have measured: the machine's own drift, at least `floor`
    (processes differ more than windows of one process do)."""
    return max(floor, result.window_sd) if result and math.isfinite(result.window_sd) else floor

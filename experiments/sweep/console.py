"""The sweep's console lines: what a point's line says (its times, its paired comparison, its flags), and their
format: plain on a terminal, prefixed with time, logger and level where they are kept (a pipe, a CI log);
conf/hydra/job_logging/nnbench.yaml names the formatter."""
from __future__ import annotations

import logging
import sys
from collections import Counter

from experiments.common.protocol import PARTS, PointResult, Stats
from experiments.measure.reading import Reading
from experiments.stats.geomean import Evidence

log = logging.getLogger("nnbench")
PREFIXED = "[%(asctime)s][%(name)s][%(levelname)s] - %(message)s"


class Formatter(logging.Formatter):
    """A record as its message on a terminal (a warning or error says so first), else with Hydra's prefix."""

    def __init__(self, prefixed: str = PREFIXED) -> None:
        super().__init__(prefixed)
        self.plain = sys.stdout.isatty()

    def format(self, record: logging.LogRecord) -> str:
        if not self.plain:
            return super().format(record)
        message = record.getMessage()
        return f"{record.levelname.lower()}: {message}" if record.levelno >= logging.WARNING else message


def point_line(r: Reading, tags: dict[str, str], profile: PointResult | None) -> str:
    """One readable line per point: its ops' times and intervals, its paired comparison, its flags, its profile
    (`tags`: its record's, for a profile's status; `profile`: the profiling worker's result)."""
    if r.failure is not None:
        return "FAILED: " + r.failure.splitlines()[0]
    parts = [said for op in r.point.ops if (said := op_line(r, op))]
    if parts and r.environment.get("sync_policy") == "pipelined":  # the CPU's numbers, and most people's, are synced
        blocks = ", ".join(f"{op} {o.result.calls_per_block}" for op, o in r.ops.items())
        parts.append(f"pipelined: calls dispatched back to back, one sync per block ({blocks} calls)")
    if r.paired is not None and r.paired.ops:
        parts.append(f"vs {r.paired.baseline}: " + ", ".join(f"{op} {c.said()}" for op, c in r.paired.ops.items()))
    if r.noisy:
        parts.append(f"NOISY: other processes used {r.background_cores:.2f} cores while it was measured")
    parts += [f"OVERSUBSCRIBED {op}: {why}" for op, why in r.oversubscribed.items() if op not in r.unstable]
    if r.replaced:
        times = Counter(x.process for x in r.replaced)
        which = ", ".join(f"{n}" + (f" ({k} times)" if k > 1 else "") for n, k in times.items())
        parts.append(f"REMEASURED process {which}: read far off while other programs ran")
    if r.unstable:
        parts.append(f"UNSTABLE: {r.hint}")
    status = tags.get("profile")
    if status not in (None, "ok"):
        parts.append(f"profile {status}: {tags['profile_reason'].splitlines()[0]}")
    for op, p in ((op, o.profile) for op, o in (profile.ops.items() if profile else ()) if o.profile):
        share = {part: p.parts_s.get(part, 0.0) for part in PARTS}
        top = max(share, key=share.get)
        device = f", the device's own {p.device_s * 1e3:.3f} ms" if p.device_s is not None else ""
        parts.append(f"{op} profiled: {p.wall_s * 1e3:.3f} ms ({p.wall_s / r.ops[op].stats.median_s:.2f}× the "
                     f"median{device}), most in {top} ({share[top] * 1e3:.3f} ms)")
    return "; ".join(parts)


def op_line(r: Reading, op: str) -> str:
    """An op's part of the console line: its time and interval, or why it has none ("" for an op not read)."""
    if op in r.ops:
        return timed(op, r.ops[op].stats)
    if op in r.unmeasured:
        return f"{op} UNMEASURED: {r.unmeasured[op].reason}"
    return f"{op} skipped ({r.skipped[op]})" if op in r.skipped else ""


def timed(op: str, s: Stats) -> str:
    return f"{op} {s.median_s * 1e3:.3f} ms [{s.ci95_low_s * 1e3:.3f}, {s.ci95_high_s * 1e3:.3f}]"


def set_aside(cells: list[Evidence]) -> None:
    """A line per trial left out of a cell's verdict (`outliers.far_trials`), and why."""
    for e in cells:
        for why in e.set_aside:
            log.info("%s %s bs%d, %s against %s: %s; left out of the verdict, kept in trials/", e.model, e.op,
                     e.batch_size, e.variant, e.baseline, why)

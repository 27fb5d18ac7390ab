"""framework=external: a runner in any language, run in a worker's place and read in seed 000's
lines (TIMING, METADATA and nnbench's SAMPLES; see docs/runners.md).

The command template (`external.command`) is expanded per job with plain comma-separated values, split like a
shell command line (no shell runs it) and started in the directory the sweep was started from. `{python}` is the
measuring interpreter (`runtime.python`, else this one): a runner in Python then runs in the environment being
measured, and an environment built by `nnbench versions` adds its spec and versions to the runs' record.
"""
from __future__ import annotations

import shlex
import shutil
import string
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from experiments.common import lines
from experiments.common.protocol import Point, PointResult, Request
from experiments.harness import manager
from experiments.measure.environment import spec_record

PLACEHOLDERS = ("model", "precision", "device", "ops", "batch_sizes", "python")


def validate(template: str | None, name: str | None, python: str = sys.executable) -> None:
    """Raise ValueError naming the fix for a missing name or command, an unknown placeholder or program."""
    if not name or not template:
        raise ValueError("framework=external needs external.name=NAME and external.command='PROGRAM ARGS' "
                         "(see docs/runners.md)")
    fields = {f for _, f, _, _ in string.Formatter().parse(template) if f is not None}
    if unknown := sorted(fields - set(PLACEHOLDERS)):
        raise ValueError(f"external.command has no placeholder {{{unknown[0]}}}: use "
                         + ", ".join(f"{{{p}}}" for p in PLACEHOLDERS))
    program = shlex.split(template.format(**dict.fromkeys(PLACEHOLDERS, "x") | {"python": python}))[0]
    if not shutil.which(program):
        raise ValueError(f"external.command runs {program!r}, which is not an executable on PATH or at that path")


def command(template: str, request: Request, python: str = sys.executable) -> list[str]:
    """The runner's argv for a job's points."""
    ops = dict.fromkeys(op for p in request.points for op in p.ops)
    values = {"model": request.model["name"], "precision": request.setup.precision, "device": request.setup.device,
              "ops": ",".join(ops), "batch_sizes": ",".join(str(p.batch_size) for p in request.points),
              "python": python}
    return shlex.split(template.format(**values))


def results(parsed: lines.Parsed, name: str, model: str, points: tuple[Point, ...], device: str,
            python: str = sys.executable) -> list[PointResult]:
    """`lines.results`, each measured point's record with the spec of the environment `python` belongs to."""
    out = lines.results(parsed, name, model, points, device)
    spec = spec_record(Path(python).parent.parent)  # the venv of bin/python: its spec, if nnbench versions built it
    for r in out:
        r.environment |= spec if r.failure is None else {}
    return out


@dataclass(frozen=True)
class Runner:
    """A job's runner: its command template (`external.command`), its name (`external.name`), and the measuring
    interpreter its `{python}` names."""

    template: str
    name: str
    python: str = sys.executable


def run(request: Request, job_dir: Path, timeout_s: float, runner: Runner,
        on_result: Callable[[PointResult], None] = lambda r: None) -> list[PointResult]:
    """Run the runner once for all the job's points; hand on one result per point (failed ones included)."""
    job_dir.mkdir(parents=True, exist_ok=True)
    argv = command(runner.template, request, runner.python)
    stdout_path, stderr_path = job_dir / "runner.out", job_dir / "runner.log"
    with open(stdout_path, "w") as out, open(stderr_path, "w") as err:
        proc = subprocess.Popen(argv, stdout=out, stderr=err, start_new_session=True)
        try:
            rc, reason = proc.wait(timeout=timeout_s * len(request.points)), None
        except subprocess.TimeoutExpired:
            manager.stop(proc)
            rc, reason = proc.returncode, f"timed out: no exit within bench.timeout_s={timeout_s:g} s per point"
        except BaseException:  # an interrupt: never leave the runner measuring
            manager.stop(proc)
            raise
    tail = stderr_path.read_text(errors="replace")[-3000:]
    if reason is None and rc != 0:
        reason = manager.exit_reason(rc, "runner", stderr_path)
    if reason is None:
        try:
            found = results(lines.parse(stdout_path.read_text(errors="replace")), runner.name, request.model["name"],
                            request.points, request.setup.device, runner.python)
        except lines.BadLine as e:
            reason = f"the runner printed a malformed line: {e}"
    if reason is not None:
        found = [PointResult(p.batch_size, failure=reason, stderr_tail=tail) for p in request.points]
    for r in found:
        on_result(r)
    return found

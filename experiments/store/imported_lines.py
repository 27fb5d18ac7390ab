"""Records from saved TIMING/METADATA lines (seed 000's, plus SAMPLES): one per framework, model and batch
size, tagged `imported=true` with the file's SHA-256 (what `nnbench import` logs). Parent side."""
from __future__ import annotations

from collections import defaultdict

from experiments.common import lines
from experiments.common.config import backends
from experiments.common.job import Job
from experiments.common.protocol import Point
from experiments.harness import external
from experiments.store import records

VARIANTS = {Job({"framework": {"name": fw, "compile": c}}, None, ()).mode: (fw, c)  # jax-jit, torch-eager, ...
            for fw in backends() for c in (True, False)}


def job(mode: str, model: str, precision: str, device: str, point: Point) -> Job:
    """The job of an imported point: an nnbench variant's, or framework=external named `mode`."""
    fw, compiled = VARIANTS.get(mode, ("external", False))
    cfg = {"framework": {"name": fw, "compile": compiled}, "external": {"name": mode, "command": None},
           "model": {"name": model}, "precision": {"name": precision}, "device": device, "repeat": 0}
    return Job(cfg, None, (point,))


def records_of(text: str, mapping: dict[str, str], precision: str, sha: str, source: str) -> list[records.Record]:
    """The records a file's lines make; `mapping`: the file's framework names -> nnbench modes (default: as is).
    Raises lines.BadLine for a line seed 000's format rejects."""
    parsed = lines.parse(text)
    groups = defaultdict(list)
    for t in parsed.timings:
        groups[(t.framework, t.model, t.batch)].append(t.op)
    out = []
    for (name, model, batch), ops in sorted(groups.items()):
        mode = mapping.get(name, name)
        device = parsed.metadata.get(f"{name} device", "n/a")
        point = Point(batch, tuple(ops))
        (result,) = external.results(parsed, name, model, (point,), device)
        rec = records.build(job(mode, model, precision, device, point), point, [result])
        rec.tags |= {"imported": "true", "import_sha256": sha, "import_file": source, "imported_name": name}
        out.append(rec)
    return out

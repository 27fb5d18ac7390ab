"""Records from saved TIMING/METADATA lines (seed 000's, plus SAMPLES): one per framework, model and batch
size, tagged `imported=true` with the file's SHA-256, and logged once per file (what `nnbench import` does). Parent
side."""
from __future__ import annotations

import hashlib
import tempfile
from collections import defaultdict
from pathlib import Path

from experiments.common import lines
from experiments.common.config import EXTERNAL, OPS, Config, Device, ExternalConf, FrameworkConf, Op, Precision, \
    PrecisionConf, backends
from experiments.common.job import Job
from experiments.common.protocol import Point
from experiments.measure.reading import read
from experiments.store import records


def variant(framework: str, compiled: bool) -> FrameworkConf:
    return FrameworkConf(framework, compiled, memory_format=None)  # a file does not say its layout


VARIANTS = {Job(Config(variant(fw, c)), None, ()).mode: (fw, c) for fw in backends() for c in (True, False)}


def config(mode: str, model: str, precision: str, device: str, ops: tuple[str, ...]) -> Config:
    """What a file says of its point, as a config: an nnbench variant's (jax-jit, torch-eager, ...), or
    framework=external named `mode`; the device it ran on as the one asked for; the schema's defaults for the rest
    (the bench keys, which a file does not know, are left unset)."""
    fw, compiled = VARIANTS.get(mode, (EXTERNAL, False))
    if unknown := [op for op in ops if op not in OPS]:
        raise ValueError(f"operation {unknown[0]!r} is not one of {', '.join(OPS)}: fix the file's TIMING lines")
    asked = Device.gpu if device.startswith(("cuda", "gpu")) else (
        Device.cpu if device.startswith("cpu") else Device.auto)
    return Config(variant(fw, compiled), {"name": model}, PrecisionConf(Precision(precision)), ops=list(map(Op, ops)),
                  device=asked, external=ExternalConf(mode if fw == EXTERNAL else None))


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
        (result,) = lines.results(parsed, name, model, (point,), device)
        job = Job(config(mode, model, precision, device, point.ops), None, (point,))
        rec = records.build(job, read(point, [result]))
        rec.tags |= {"imported": "true", "import_sha256": sha, "import_file": source, "imported_name": name}
        out.append(rec)
    return out


def parsed(data: bytes, mapping: dict[str, str], precision: str, name: str) -> tuple[str, list[records.Record]]:
    """A file's bytes as its SHA-256 and the records its lines make (`records_of`); raises lines.BadLine (a
    ValueError) or UnicodeDecodeError for a file that isn't seed 000's lines."""
    sha = hashlib.sha256(data).hexdigest()
    return sha, records_of(data.decode(), mapping, precision, sha, name)


def logged(file: Path, data: bytes, sha: str, recs: list[records.Record], uri: str, experiment: str) -> int:
    """The file's records logged as runs into the store, each with the file beside its record; nothing where a run
    already holds the file's SHA-256 (imported before). How many runs were logged; tracking.StoreUnavailable for a
    store that can't be opened."""
    from experiments.store import tracking  # mlflow is slow to import: only once the file reads

    store = tracking.Store(uri)
    exp_id = store.open(experiment, "--uri")
    done = store.find_runs(exp_id, f"tags.import_sha256 = '{sha}'")
    if len(done):
        print(f"{file} was imported before ({len(done)} runs with import_sha256={sha[:12]}...): nothing added")
        return 0
    for rec in recs:
        with tempfile.TemporaryDirectory() as tmp:
            rec.save(Path(tmp))
            (Path(tmp) / file.name).write_bytes(data)
            run_id = store.log_record(exp_id, rec, Path(tmp))
        print(f"{rec.run_name} -> run {run_id}")
    print(f"{len(recs)} runs imported from {file} into {uri}")
    return len(recs)

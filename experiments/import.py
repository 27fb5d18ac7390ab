"""Log saved TIMING/METADATA output as runs: `python -m experiments.import FILE --framework-map JAX=jax-jit,...`

FILE holds seed 000's lines (and nnbench's SAMPLES), e.g. the seed page's own Julia timings or a runner's
output from another machine. Each (framework, model, batch size) becomes one run with its ops, tagged
`imported=true` and with the file's SHA-256; importing the same file again adds nothing.

`--framework-map` says what each framework name in the file was: `jax-jit`, `jax-eager`, `torch-eager` or
`torch-compile` for nnbench's variants, anything else for another framework (the default: its own name).
"""
from __future__ import annotations

import argparse
import hashlib
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

from experiments import records
from experiments.config import backends

VARIANTS = {records.mode({"framework": {"name": fw, "compile": c}}): (fw, c)  # jax-jit, torch-eager, ...
            for fw in backends() for c in (True, False)}


def config(mode: str, model: str, precision: str, device: str) -> dict:
    """The config of an imported run: an nnbench variant's, or framework=external named `mode`."""
    fw, compiled = VARIANTS.get(mode, ("external", False))
    return {"framework": {"name": fw, "compile": compiled}, "external": {"name": mode, "command": None},
            "model": {"name": model}, "precision": {"name": precision}, "device": device, "repeat": 0}


def records_of(text: str, mapping: dict[str, str], precision: str, sha: str, source: str):
    """The records a file's lines make, one per (framework, model, batch size)."""
    from experiments import external, sciml
    from experiments.protocol import Point

    parsed = sciml.parse(text)
    groups = defaultdict(list)
    for t in parsed.timings:
        groups[(t.framework, t.model, t.batch)].append(t.op)
    out = []
    for (name, model, batch), ops in sorted(groups.items()):
        mode = mapping.get(name, name)
        device = parsed.metadata.get(f"{name} device", "n/a")
        cfg = config(mode, model, precision, device)
        point = Point(batch, tuple(ops))
        (result,) = external.results(parsed, name, model, (point,), device)
        rec = records.build(cfg, point, [result], 0)
        rec.tags |= {"imported": "true", "import_sha256": sha, "import_file": source, "imported_name": name}
        out.append(rec)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m experiments.import", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("file", type=Path, help="a file of TIMING/METADATA (and SAMPLES) lines")
    p.add_argument("--framework-map", default="", help="NAME=MODE,...: e.g. JAX=jax-jit,PyTorch=torch-eager,Lux=Lux")
    p.add_argument("--precision", default="fp32", help="the precision the file's timings ran at (default fp32)")
    p.add_argument("--uri", help="tracking URI (default: $MLFLOW_TRACKING_URI, else sqlite:///mlruns/mlflow.db)")
    p.add_argument("--experiment", default="nnbench")
    a = p.parse_args(argv)
    from experiments import sciml, tracking
    from experiments.compare import fail

    try:
        data = a.file.read_bytes()
        mapping = dict(pair.split("=", 1) for pair in a.framework_map.split(",") if pair)
        sha = hashlib.sha256(data).hexdigest()
        recs = records_of(data.decode(), mapping, a.precision, sha, a.file.name)
    except (OSError, ValueError, UnicodeDecodeError, sciml.ProtocolError) as e:
        return fail("import", e)
    uri = tracking.store_uri(a.uri)
    try:
        exp_id = tracking.open_store(uri, a.experiment)
    except tracking.StoreUnavailable as e:
        return fail("import", e)
    done = tracking.find_runs(uri, exp_id, f"tags.import_sha256 = '{sha}'")
    if len(done):
        print(f"{a.file} was imported before ({len(done)} runs with import_sha256={sha[:12]}...): nothing added")
        return 0
    for rec in recs:
        with tempfile.TemporaryDirectory() as tmp:
            rec.save(Path(tmp))
            (Path(tmp) / a.file.name).write_bytes(data)
            run_id = tracking.log_record(uri, exp_id, rec, Path(tmp))
        print(f"{rec.run_name} -> run {run_id}")
    print(f"{len(recs)} runs imported from {a.file} into {uri}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""`python -m experiments.measure.step_export EXPORT`: one op of a point built as a worker builds it, in the point's
environment, and exported for a script that runs it with the framework alone (torch.export's .pt2; jax.export's
serialized StableHLO and its arguments): the backend's `export`. It prints the files it wrote, one a line, or one
line saying why it can't (exit 3)."""
from __future__ import annotations

import sys
from pathlib import Path

import models
from experiments.common.protocol import Export
from experiments.measure.backends import Unavailable, Unsupported, load
from experiments.measure.worker import pin


def main(text: str) -> int:
    e = Export.from_json(text)
    pin(e.framework, e.setup.threads)
    backend = load(e.framework)
    if not hasattr(backend, "export"):  # a reference backend that builds no program a framework could load
        print(f"Unsupported: the {e.framework} backend exports no step", file=sys.stderr)
        return 3
    try:
        backend.configure(e.setup)
        files = backend.export(models.declared(**e.model), e.op, e.batch_size, e.seed, Path(e.out))
    except (Unavailable, Unsupported, ImportError) as err:
        print(f"{type(err).__name__}: {err}".splitlines()[0], file=sys.stderr)
        return 3
    print("\n".join(map(str, files)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))

"""The jax side's loader of the standalone script (compare/standalone.py, which upstream drafts ship as repro.py):
written into that script, so it imports only the standard library and, inside, jax and numpy."""
import os
from pathlib import Path


def jax_step(path: Path, op: str, compiled: bool, threads: int | None):
    """One call of the exported step (jax.export's serialized StableHLO at `path`, its arguments beside it in .npz),
    jitted and synced; `compiled` aside: the exported program is always jitted."""
    import jax  # the framework: only in the side's process
    import numpy as np  # jax needs it: the arguments come as .npz

    if threads:  # XLA runs one thread per core it may use
        os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:threads])
    program = jax.export.deserialize(bytearray(path.read_bytes()))
    arrays = np.load(path.with_suffix(".npz"))
    args, _ = jax.tree.unflatten(program.in_tree, [jax.numpy.asarray(arrays[k]) for k in arrays.files])
    call, args = jax.jit(program.call, donate_argnums=0 if op == "training" else ()), list(args)

    def step():
        out = call(*args)
        if op == "training":  # the new state goes into the next step
            args[0] = out[0]
        jax.block_until_ready(out)
    return step

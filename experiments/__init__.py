"""nnbench: JAX/Flax vs PyTorch benchmarks, configured with Hydra and tracked in MLflow.

The packages are layers; each imports only the ones below it, and report, store and harness are siblings that
import none of each other (import-linter checks this, see pyproject.toml; docs/development.md has the map):

    cli/        `nnbench` (`python -m experiments`): one module per command, one error path
    selfcheck/  checks of the harness and the machine: check, agree, calibrate, overhead, gpucheck; a planted regression
    sweep/      the Hydra control (`run.py`): the door (command line, preflight), opening, one job, its points, ending
    report/     tables, plots, pages, verdicts and change points along an axis, seed 000's lines out
    store/      where results are kept: the sweep dir on disk first, then MLflow (the only mlflow user)
    harness/    the parent's side of a worker: start, watch, stop; runners in other languages; environments per version
    measure/    the measuring core: what runs inside the worker, and a point's reading from its processes' results
    common/     what every layer shares: the config schema, the typed job, the worker protocol, the names of a run's
                columns, seed 000's lines, errors

Words: a *sweep* is one command line (one MLflow parent run); a *job* is one composed config (a Hydra job); a
*point* is one batch size of a job (one MLflow run); a *worker* is a fresh measuring process, `bench.processes`
of them per point, started and watched by the *harness* in the parent.
"""

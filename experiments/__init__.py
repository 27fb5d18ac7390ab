"""nnbench: JAX/Flax vs PyTorch benchmarks, configured with Hydra and tracked in MLflow.

The packages are layers, top to bottom: cli, compare, selfcheck, sweep, then report, store and harness (siblings that
import none of each other), measure, common. Each imports only the ones below it; import-linter checks it (pyproject.toml).
docs/development.md#the-layers is the map (what each module holds, which side of the process boundary it runs on),
and docs/reference.md#glossary the words.
"""

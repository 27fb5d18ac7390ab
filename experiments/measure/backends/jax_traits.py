"""The jax backend as the parent sees it (`common.frameworks.Traits`): imports no framework."""
from __future__ import annotations

import sys

from experiments.common.frameworks import Traits
from experiments.common.protocol import Setup


def started() -> str | None:
    """Why a fork now would not be fresh: XLA's backend started (in jax's server, or a user's network that imports
    jax)."""
    bridge = sys.modules.get("jax._src.xla_bridge")
    return "the XLA backend started before fork" if bridge is not None and bridge._backends else None


TRAITS = Traits(
    name="jax",
    compiled="jit",
    smoke=Setup("fp32", "cpu", compile=True, memory_format="nhwc"),
    builder="flax",
    module="Flax NNX module",
    packages=("jax", "jaxlib", "flax", "optax"),
    threads="XLA's CPU threads (framework.threads, which runs the worker on that many cores)",
    seed_name="JAX",
    seed_variant="jit",
    companions={"jax": ("jaxlib",)},
    pin_threads=True,
    started=started,
    cache_on={"JAX_COMPILATION_CACHE_DIR": "{dir}/jax",
              # the default, 1 s, skips every seed model's compile
              "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
              "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "-1"},
    cache_off={"JAX_ENABLE_COMPILATION_CACHE": "false"},
    reference=True,
    counter="xla",
    # jax.export's deserialization needs flatbuffers
    beside={"tpu": "tpu", "gpu": "cuda"},
    script=("jax", "jaxlib", "flatbuffers"),
)

"""The numpy reference backend as the parent sees it (`common.frameworks.Traits`)."""
from __future__ import annotations

from experiments.common.frameworks import Traits
from experiments.common.protocol import Setup

TRAITS = Traits(
    name="numpy",
    compiled="compile",  # it has none: framework.compile=true is refused at the door
    smoke=Setup("fp32", "cpu", compile=False, memory_format="nhwc"),
    builder="",  # builds no user's network
    module="",
    packages=("numpy",),
    threads="numpy's BLAS threads (OMP_NUM_THREADS)",
    seed_name="numpy",
    seed_variant="eager",
)

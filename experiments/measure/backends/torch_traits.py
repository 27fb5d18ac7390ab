"""The torch backend as the parent sees it (`common.frameworks.Traits`): imports no framework."""
from __future__ import annotations

from experiments.common.frameworks import Traits
from experiments.common.protocol import Setup

TRAITS = Traits(
    name="torch",
    compiled="compile",
    smoke=Setup("fp32", "cpu", compile=False, memory_format="contiguous"),
    builder="torch",
    module="torch module",
    packages=("torch",),
    threads="torch's intra-op threads (framework.threads, torch.set_num_threads)",
    seed_name="PyTorch",
    seed_variant="eager",
    hold=("torch", "torchvision", "torchaudio"),
    # torch.compile's front end: a worker's first prepare imports it otherwise, eager or compiled (a second of CPU)
    preloads=("torch._dynamo", "torch._inductor.config"),
    cache_on={"TORCHINDUCTOR_CACHE_DIR": "{dir}/inductor",  # not the machine-wide /tmp/torchinductor_<user>
              "TORCHINDUCTOR_FX_GRAPH_CACHE": "1", "TORCHINDUCTOR_AUTOGRAD_CACHE": "1"},
    cache_off={"TORCHINDUCTOR_FX_GRAPH_CACHE": "0", "TORCHINDUCTOR_AUTOGRAD_CACHE": "0"},
    cuda_graphs=True,
    reference=True,
    counter="torch",
    beside={"tpu": "cpu", "gpu": "cuda"},
    script_compiles=True,
    script=("torch",),
)

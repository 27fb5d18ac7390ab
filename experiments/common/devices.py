"""The accelerators this machine has, as the operating system lists them, read without any framework: TPU chips on
the PCI bus (Google's vendor id, as jax's own check reads it), NVIDIA device nodes. The door and the config's presets
read it in the parent, where opening a TPU would take the chip from the workers (one process at a time may hold
it); a backend reads it in the worker to tell "none here" from "here, but the framework can't open it". Both sides.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

GOOGLE_PCI_VENDOR = "0x1ae0"
# A TPU chip's PCI device id and the kind jax names its devices (`Device.device_kind`), from jax's own table
# (jax/_src/hardware_utils.py) and the kinds it reports: a TPU v5e is "TPU v5 lite".
TPU_KINDS = {"0x0027": "TPU v3", "0x005e": "TPU v4", "0x0062": "TPU v5", "0x0063": "TPU v5 lite",
             "0x006f": "TPU v6 lite", "0x0076": "TPU7x"}
# Where the bus is hidden (a gVisor sandbox lists no PCI devices), a Cloud TPU VM still names its slice's type in its
# environment (TPU_ACCELERATOR_TYPE, e.g. `v5litepod-4`) and shows its chips as device nodes (/dev/vfio/0, or
# /dev/accel0 on older images): the type's generation, by its prefix, is the chip's kind.
TPU_TYPES = {"v5litepod": "TPU v5 lite", "v5e": "TPU v5 lite", "v6e": "TPU v6 lite", "v5p": "TPU v5", "v4": "TPU v4",
             "v3": "TPU v3"}
TPU_NODES = ("dev/vfio/[0-9]*", "dev/accel[0-9]*")
NVIDIA_NODES = ("dev/nvidia0", "dev/nvidiactl", "dev/dxg")  # a GPU node, Docker's control node, WSL2's
# Platforms only one process at a time may open: a second libtpu client stops with "Internal error when accessing
# libtpu multi-process lockfile". Helper processes (probes, parity, FLOP counts) never open them.
EXCLUSIVE = ("tpu",)
ACCELERATORS = ("tpu", "gpu")  # device= options that name an accelerator; `cpu` and `auto` are the others


@dataclass(frozen=True)
class Present:
    """What the machine has besides its CPU: each TPU chip's kind, and whether an NVIDIA device node exists."""

    tpus: tuple[str, ...] = ()
    gpu: bool = False

    def has(self, platform: str) -> bool:
        return bool(self.tpus) if platform == "tpu" else self.gpu if platform == "gpu" else platform == "cpu"

    @property
    def exclusive(self) -> bool:
        """Whether the machine has a device only one process may hold."""
        return any(self.has(p) for p in EXCLUSIVE)

    def kind(self, platform: str) -> str:
        """What a device of the platform is called, as far as the bus says (`TPU v5 lite`)."""
        return self.tpus[0] if platform == "tpu" and self.tpus else platform.upper()


def present(root: Path = Path("/"), environ: dict[str, str] | None = None) -> Present:
    """The accelerators under `root` and in `environ` (a fake tree and environment in the tests): unreadable entries
    count as absent."""
    tpus = []
    for vendor in sorted(root.glob("sys/bus/pci/devices/*/vendor")):
        try:
            if vendor.read_text().strip() == GOOGLE_PCI_VENDOR:
                kind = TPU_KINDS.get((vendor.parent / "device").read_text().strip())
                tpus += [kind] if kind else []
        except OSError:
            continue
    return Present(tuple(tpus) or sandboxed_tpus(root, os.environ if environ is None else environ),
                   any((root / node).exists() for node in NVIDIA_NODES))


def sandboxed_tpus(root: Path, environ: dict[str, str]) -> tuple[str, ...]:
    """A TPU VM's chips where its PCI bus is hidden: one per chip node, of the kind its accelerator type names."""
    kind = TPU_TYPES.get(environ.get("TPU_ACCELERATOR_TYPE", "").split("-")[0])
    chips = sorted({str(p) for pattern in TPU_NODES for p in root.glob(pattern)})
    return (kind,) * len(chips) if kind else ()


def platform(device: str) -> str:
    """The `device=` option a worker's device is (`tpu:0` tpu, `cuda:0` gpu, `cpu` cpu): a job's `device=auto` as its
    door's probe resolved it, so the parent knows which workers will hold a device only one may open."""
    kind = device.split(":")[0]
    return "gpu" if kind in ("cuda", "gpu") else kind


def accelerated(device: str, machine: Present | None = None) -> bool:
    """Whether a `device=` option runs on an accelerator here: tpu and gpu do; auto does where the machine has one."""
    if device == "auto":
        machine = machine or present()
        return any(machine.has(p) for p in ACCELERATORS)
    return device in ACCELERATORS

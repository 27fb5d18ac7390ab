"""The accelerators a machine has, read from the bus and /dev without a framework (a fake tree here), and what a
preset sizes for."""
from __future__ import annotations

import pytest

from experiments.common import config, devices
from experiments.common.devices import Present


def machine(tmp_path, pci: dict[str, tuple[str, str]], nodes: tuple[str, ...] = ()):
    """A fake root: PCI functions (name -> vendor, device) and device nodes under dev/."""
    for name, (vendor, device) in pci.items():
        d = tmp_path / "sys" / "bus" / "pci" / "devices" / name
        d.mkdir(parents=True)
        (d / "vendor").write_text(vendor + "\n")
        (d / "device").write_text(device + "\n")
    for node in nodes:
        (tmp_path / "dev").mkdir(parents=True, exist_ok=True)
        (tmp_path / "dev" / node).write_text("")
    return tmp_path


def test_a_tpu_chip_is_found_on_the_bus_by_its_kind(tmp_path):
    root = machine(tmp_path, {"0000:00:04.0": ("0x1ae0", "0x0063"), "0000:00:05.0": ("0x8086", "0x0063"),
                              "0000:00:06.0": ("0x1ae0", "0x0042")})  # another vendor's id; a Google non-TPU function
    found = devices.present(root)
    assert found == Present(("TPU v5 lite",), gpu=False) and found.exclusive and found.kind("tpu") == "TPU v5 lite"
    assert devices.accelerated("auto", found) and not devices.accelerated("cpu", found)


def test_a_sandboxed_tpu_vm_is_found_by_its_chip_nodes_and_accelerator_type(tmp_path):
    """gVisor hides the PCI bus; the VM's environment names its slice and /dev shows its chips."""
    root = machine(tmp_path, {})
    (root / "dev" / "vfio").mkdir(parents=True)
    for node in ("0", "vfio"):  # a chip's group, and the container's control node (not a chip)
        (root / "dev" / "vfio" / node).write_text("")
    found = devices.present(root, {"TPU_ACCELERATOR_TYPE": "v5litepod-4"})
    assert found == Present(("TPU v5 lite",)) and found.exclusive
    assert devices.present(root, {}) == Present()  # chip nodes alone, no type: not taken for a TPU
    assert devices.present(tmp_path / "empty", {"TPU_ACCELERATOR_TYPE": "v5litepod-4"}) == Present()


def test_an_nvidia_node_is_a_gpu_and_nothing_is_a_cpu_machine(tmp_path):
    gpu = devices.present(machine(tmp_path / "a", {}, ("nvidia0",)))
    assert gpu == Present((), gpu=True) and not gpu.exclusive and gpu.has("gpu") and devices.accelerated("auto", gpu)
    assert devices.present(tmp_path / "empty") == Present() and not devices.accelerated("auto", Present())


@pytest.mark.parametrize("device,machine_has,size", [("cpu", Present(("TPU v5 lite",)), 32), ("tpu", Present(), 64),
                                                      ("gpu", Present(), 64), ("auto", Present(("TPU v4",)), 64),
                                                      ("auto", Present(), 32)])
def test_a_preset_takes_its_accelerator_size_on_a_tpu_too(monkeypatch, device, machine_has, size):
    monkeypatch.setattr(devices, "present", lambda root=None: machine_has)
    assert config.size_for_device(device, 64, 32) == size


@pytest.mark.parametrize("device, probed, start", [("cpu", None, "fork"), ("auto", "cpu", "fork"),
                                                   ("auto", "tpu:0", "spawn"), ("gpu", None, "spawn"),
                                                   ("tpu", "tpu:0", "spawn")])
def test_workers_that_hold_an_accelerator_are_spawned_never_forked(device, probed, start):
    """A fork server's framework has started threads by the time it forks, which on a TPU hung XLA's compiler in the
    forked worker: there, and on a GPU, `runtime.start=fork` spawns."""
    from experiments.common.job import Job
    from tests.helpers import config as composed

    job = Job(composed("framework=jax", f"device={device}", "runtime.start=fork"), None, (), device=probed)
    assert job.start == start

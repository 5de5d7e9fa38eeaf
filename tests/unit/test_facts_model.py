"""HostFacts behaviour others rely on: free space lookup, template vars, an empty placeholder."""

from __future__ import annotations

import jinja2

from provision.facts import DiskFree, HostFacts, OsInfo
from provision.gpu.model import GpuDevice, NvidiaSmiGpu

DISKS = (
    DiskFree(path="/", free_bytes=100, total_bytes=1000),
    DiskFree(path="/var/lib/docker", free_bytes=200, total_bytes=2000),
    DiskFree(path="/var", free_bytes=300, total_bytes=3000),
)


def test_free_bytes_uses_the_longest_mount_prefix() -> None:
    facts = HostFacts(disks=DISKS)
    assert facts.free_bytes("/var/lib/docker/overlay2") == 200
    assert facts.free_bytes("/var/lib/docker") == 200
    assert facts.free_bytes("/var/cache/apt") == 300
    assert facts.free_bytes("/var/lib/dockerish") == 300  # a prefix of the name is not a mount prefix
    assert facts.free_bytes("/root/.cache/huggingface") == 100


def test_free_bytes_is_none_without_disk_facts() -> None:
    assert HostFacts.empty().free_bytes("/") is None


def test_empty_is_a_host_with_nothing_known() -> None:
    facts = HostFacts.empty()
    assert facts.os == OsInfo() and facts.gpus == () and facts.pci_gpus == ()
    assert facts.secure_boot == "unknown" and facts.driver_version is None
    assert facts.nvidia_smi_ok is False and facts.open_kernel_module is None


def test_lists_become_tuples_so_facts_compare_and_stay_frozen() -> None:
    device = GpuDevice(pci_address="0000:01:00.0", vendor_id="10de", device_id="2c58")
    assert HostFacts(pci_gpus=[device]) == HostFacts(pci_gpus=(device,))
    assert hash(HostFacts.empty().replace(secure_boot="enabled"))


def test_as_vars_renders_in_jinja_templates() -> None:
    facts = HostFacts(
        os=OsInfo(id="ubuntu", version_id="24.04", codename="noble", pretty="Ubuntu 24.04.3 LTS"),
        gpus=(NvidiaSmiGpu(index=0, name="NVIDIA GeForce RTX 5090 Laptop GPU", pci_device_id="2c58",
                           driver_version="580.95.05", compute_cap="12.0", memory_total_mib=24463),),
        pci_gpus=(GpuDevice(pci_address="0000:02:00.0", vendor_id="10de", device_id="2c58"),),
    )
    template = jinja2.Environment(undefined=jinja2.StrictUndefined).from_string(
        "{{ facts.os.id }}{{ facts.os.version_id | replace('.', '') }} {{ facts.os.codename }} "
        "sm{{ facts.gpus[0].compute_cap }} {{ facts.pci_gpus | map(attribute='device_id') | join(',') }}"
    )
    assert template.render(facts=facts.as_vars()) == "ubuntu2404 noble sm12.0 2c58"


def test_as_vars_is_plain_data() -> None:
    variables = HostFacts(disks=DISKS).as_vars()
    assert variables["disks"][1] == {"path": "/var/lib/docker", "free_bytes": 200, "total_bytes": 2000}
    assert variables["os"] == {"id": "", "version_id": "", "codename": "", "pretty": ""}

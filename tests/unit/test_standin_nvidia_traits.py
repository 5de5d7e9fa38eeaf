"""The lab's host traits: the fake PCI tree, Secure Boot, PRIME and the GPU profile file."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from provision.gpu.facts import SECTIONS
from tests.standins.nvidia import (
    H200,
    RTX_5090_LAPTOP,
    HostTraits,
    host_traits_files,
    host_traits_mounts,
    make_fake_pci_tree,
)
from tests.standins.nvidia.host_traits import INTEL_IGPU, gpu_pci_device

# the facts probe's own loop over /sys/bus/pci/devices (its pci-nvidia section's function and the command
# the section runs it with), pointed at the fake tree
PROBE = (Path(__file__).resolve().parents[2] / "provision/gpu/probe.sh").read_text()
PCI_NVIDIA = next(section for section in SECTIONS if section.name == "pci-nvidia")
PCI_NVIDIA_LOOP = (PROBE.split("\nprobe_pci_nvidia() {\n", 1)[1].split("\n}\n", 1)[0]
                   .replace("/sys/bus/pci/devices/*", '"$0"/*').replace('"$1"', PCI_NVIDIA.script.split(" ", 1)[1]))


def test_fake_pci_tree_reads_like_sysfs(tmp_path: Path) -> None:
    tree = make_fake_pci_tree(tmp_path / "devices", [INTEL_IGPU, gpu_pci_device(RTX_5090_LAPTOP)])
    gpu = tree / "0000:01:00.0"
    attributes = [(gpu / name).read_text() for name in ("vendor", "device", "class")]
    assert attributes == ["0x10de\n", "0x2c58\n", "0x030000\n"]
    assert (tree / "0000:00:02.0/vendor").read_text() == "0x8086\n"
    assert (gpu / "config").read_bytes()[:4] == bytes([0xDE, 0x10, 0x58, 0x2C])
    found = subprocess.run(["sh", "-c", PCI_NVIDIA_LOOP, str(tree)], capture_output=True, text=True).stdout
    assert found == "0000:01:00.0 0x10de 0x2c58 0x030000\n"


def test_a_data_centre_gpu_is_a_3d_controller_at_its_own_slot(tmp_path: Path) -> None:
    tree = make_fake_pci_tree(tmp_path, HostTraits(gpu=H200, intel_igpu=False).pci_devices())
    assert (tree / "0000:00:06.0/class").read_text() == "0x030200\n"
    assert not (tree / "0000:00:02.0").exists()


def test_mounts_put_the_trees_where_the_tool_reads_them(tmp_path: Path) -> None:
    mounts = host_traits_mounts(HostTraits(secure_boot=True), tmp_path)
    assert [(m.target, m.read_only) for m in mounts] == [("/sys/bus/pci/devices", True), ("/sys/firmware", True)]
    assert mounts[0].docker_volume() == f"{tmp_path}/pci-devices:/sys/bus/pci/devices:ro"
    variable = mounts[1].source / "efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c"
    assert variable.read_bytes() == b"\x06\x00\x00\x00\x01"
    assert [m.target for m in host_traits_mounts(HostTraits(), tmp_path / "plain")] == ["/sys/bus/pci/devices"]


def write_files(traits: HostTraits, root: Path) -> dict[str, Path]:
    written = {}
    for item in host_traits_files(traits):
        target = root / item.path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(item.content)
        target.chmod(item.mode)
        written[item.path] = target
    return written


def test_mokutil_answers_the_secure_boot_state(tmp_path: Path) -> None:
    for enabled, answer in ((True, "SecureBoot enabled\n"), (False, "SecureBoot disabled\n")):
        files = write_files(HostTraits(secure_boot=enabled), tmp_path / str(enabled))
        result = subprocess.run([files["/usr/local/bin/mokutil"], "--sb-state"], capture_output=True, text=True)
        assert (result.returncode, result.stdout) == (0, answer)
    assert "/usr/local/bin/mokutil" not in {f.path for f in host_traits_files(HostTraits())}


def test_prime_select_reports_and_switches_the_profile(tmp_path: Path) -> None:
    files = write_files(HostTraits(prime_profile="intel"), tmp_path)
    env = {**os.environ, "NVIDIA_STANDIN_ROOT": str(tmp_path)}

    def prime(*args: str) -> str:
        return subprocess.run([files["/usr/local/bin/prime-select"], *args], env=env, capture_output=True,
                              text=True).stdout

    assert prime("query") == "intel\n"
    assert "blacklist nvidia\n" in (tmp_path / "lib/modprobe.d/blacklist-nvidia.conf").read_text()
    if os.geteuid() == 0:
        prime("on-demand")
        assert prime("query") == "on-demand\n"
        assert not (tmp_path / "lib/modprobe.d/blacklist-nvidia.conf").exists()


def test_the_gpu_profile_file_is_the_profile(tmp_path: Path) -> None:
    files = write_files(HostTraits(gpu=H200), tmp_path)
    profile = json.loads(files["/etc/nvidia-standin/gpu.json"].read_text())
    assert (profile["name"], profile["pci_device_id"], profile["compute_cap"], profile["memory_mib"]) == (
        "NVIDIA H200", "0x2335", "9.0", 143771)
    assert "/etc/nvidia-standin/gpu.json" not in {f.path for f in host_traits_files(HostTraits(gpu=None))}


def test_nouveau_trait_installs_a_boot_unit(tmp_path: Path) -> None:
    files = write_files(HostTraits(nouveau_at_boot=True), tmp_path)
    unit = files["/etc/systemd/system/standin-nouveau.service"].read_text()
    assert "ExecStart=/usr/local/lib/nvidia-standin/nouveau-at-boot" in unit
    drop_in = files["/etc/systemd/system/sysinit.target.d/standin-nouveau.conf"]
    assert "Wants=standin-nouveau.service" in drop_in.read_text()

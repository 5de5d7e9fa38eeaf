"""The stand-in nvidia-smi and kernel module: recorded formats, failing until a reboot, mismatch."""

from __future__ import annotations

import os
import signal
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from provision.gpu.parse import parse_nvidia_smi_pids
from tests.standins.nvidia import H200, RTX_4090, RTX_5090_LAPTOP, HostTraits, RepoInfo, build_repo
from tests.standins.nvidia.payload import query_gpu_fields, render
from tests.standins.nvidia.sandbox import StandinRoot

CAPTURES = Path(__file__).parents[1] / "standins/nvidia/captures/h200-driver580"
OLD, NEW = "580.95.05-1", "580.105.08-1"
DRIVER = ("nvidia-smi", "libnvidia-ml1", "nvidia-persistenced", "nvidia-kernel-open-dkms")
NOT_LOADED = ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
              "Make sure that the latest NVIDIA driver is installed and running.\n\n")
PROBE_QUERY = ("--query-gpu=name,driver_version,compute_cap,memory.total", "--format=csv,noheader,nounits")


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> RepoInfo:
    return build_repo(tmp_path_factory.getbasetemp() / "standin-nvidia-repo", "http://10.0.2.2:8765")


@pytest.fixture
def host(repo: RepoInfo, tmp_path: Path) -> StandinRoot:
    """A laptop with the old driver installed and not yet rebooted."""
    root = StandinRoot(tmp_path / "root", repo)
    root.unpack(OLD, *DRIVER)
    return root


def smi(host: StandinRoot, *args: str) -> subprocess.CompletedProcess[str]:
    return host.run("/usr/bin/nvidia-smi", *args)


def test_fails_like_the_real_one_until_the_host_reboots(host: StandinRoot) -> None:
    before = smi(host)
    assert (before.returncode, before.stdout) == (9, NOT_LOADED)
    host.reboot()
    after = smi(host, *PROBE_QUERY)
    assert (after.returncode, after.stdout) == (0, "NVIDIA GeForce RTX 5090 Laptop GPU, 580.95.05, 12.0, 24463\n")
    assert host.read("/sys/module/nvidia/version") == "580.95.05\n"
    assert "NVIDIA UNIX Open Kernel Module for x86_64  580.95.05  " in host.read("/proc/driver/nvidia/version")


def test_an_upgrade_gives_a_version_mismatch_until_reboot(host: StandinRoot) -> None:
    host.reboot()
    host.unpack(NEW, *DRIVER)
    mismatch = smi(host, "-L")
    assert mismatch.returncode == 18
    assert mismatch.stdout == (
        "Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 580.105\n")
    # modprobe of a loaded module changes nothing: the old one stays in the kernel
    assert host.run("/usr/lib/nvidia-standin/modload", "nvidia").returncode == 0
    assert host.read("/sys/module/nvidia/version") == "580.95.05\n"
    host.reboot()
    assert smi(host, *PROBE_QUERY).stdout == "NVIDIA GeForce RTX 5090 Laptop GPU, 580.105.08, 12.0, 24463\n"


def test_modprobe_loads_the_module_without_a_reboot_when_nothing_holds_the_gpu(host: StandinRoot) -> None:
    assert host.run("/usr/lib/nvidia-standin/modload", "nvidia").returncode == 0
    assert smi(host, "-L").returncode == 0
    unload = host.run("/usr/lib/nvidia-standin/modload", "--unload", "nvidia")
    assert unload.returncode == 0 and smi(host).returncode == 9


@pytest.mark.parametrize(("traits", "error"), [
    (HostTraits(nouveau_at_boot=True), "could not insert 'nvidia': No such device"),
    (HostTraits(secure_boot=True), "could not insert 'nvidia': Key was rejected by service"),
    (HostTraits(gpu=None), "could not insert 'nvidia': No such device"),
])
def test_the_module_does_not_load_when_the_host_forbids_it(repo: RepoInfo, tmp_path: Path, traits: HostTraits,
                                                           error: str) -> None:
    host = StandinRoot(tmp_path / "root", repo, traits)
    host.unpack(OLD, *DRIVER)
    boot = host.reboot()
    assert boot is not None and boot.returncode == 0  # a failed module leaves no failed unit
    assert error in boot.stderr
    modprobe = host.run("/usr/lib/nvidia-standin/modload", "nvidia")
    assert modprobe.returncode == 1 and error in modprobe.stderr
    assert smi(host).returncode == 9


def test_blacklisting_nouveau_lets_the_driver_load_after_reboot(repo: RepoInfo, tmp_path: Path) -> None:
    host = StandinRoot(tmp_path / "root", repo, HostTraits(nouveau_at_boot=True))
    host.unpack(OLD, *DRIVER)
    host.reboot()
    assert host.exists("/sys/module/nouveau")
    host.write("/etc/modprobe.d/blacklist-nouveau.conf", "blacklist nouveau\noptions nouveau modeset=0\n")
    host.reboot()
    assert not host.exists("/sys/module/nouveau")
    assert smi(host, "-L").returncode == 0


def test_prime_select_intel_keeps_the_driver_unloaded_at_boot(repo: RepoInfo, tmp_path: Path) -> None:
    host = StandinRoot(tmp_path / "root", repo, HostTraits(prime_profile="intel"))
    host.unpack(OLD, *DRIVER)
    assert host.run("/usr/local/bin/prime-select", "query").stdout == "intel\n"
    host.reboot()
    assert smi(host).returncode == 9
    if os.geteuid() == 0:  # switching needs root, like the real prime-select
        host.run("/usr/local/bin/prime-select", "nvidia")
        assert host.run("/usr/local/bin/prime-select", "query").stdout == "nvidia\n"
        host.reboot()
        assert smi(host).returncode == 0


def test_the_proprietary_module_finds_no_blackwell_gpu(repo: RepoInfo, tmp_path: Path) -> None:
    host = StandinRoot(tmp_path / "root", repo)
    host.unpack(OLD, "nvidia-smi", "libnvidia-ml1", "nvidia-kernel-dkms")
    host.reboot()
    result = smi(host)
    assert (result.returncode, result.stdout) == (6, "No devices were found\n")
    h200 = StandinRoot(tmp_path / "h200", repo, HostTraits(gpu=H200, intel_igpu=False))
    h200.unpack(OLD, "nvidia-smi", "libnvidia-ml1", "nvidia-kernel-dkms")
    h200.reboot()
    assert smi(h200, "-L").stdout.startswith("GPU 0: NVIDIA H200 (UUID: ")


def test_persistenced_fails_without_the_driver_and_turns_persistence_on(host: StandinRoot) -> None:
    early = host.run("/usr/bin/nvidia-persistenced", "--verbose")
    assert early.returncode == 1
    assert "nvidia-persistenced failed to initialize. Check syslog for more details." in early.stderr
    host.reboot()
    assert host.run("/usr/bin/nvidia-persistenced", "--verbose").returncode == 0
    pid = int(host.read("/run/nvidia-persistenced/nvidia-persistenced.pid"))
    try:
        assert smi(host, "--query-gpu=persistence_mode", "--format=csv,noheader").stdout == "Enabled\n"
        assert "|   0  NVIDIA GeForce RTX 5090 ...    On  |" in smi(host).stdout
    finally:
        os.kill(pid, signal.SIGTERM)


def test_legacy_persistence_mode_can_be_set_by_nvidia_smi(host: StandinRoot) -> None:
    host.reboot()
    result = smi(host, "-pm", "1")
    assert result.stdout == "Enabled Legacy persistence mode for GPU 00000000:01:00.0.\nAll done.\n"
    assert smi(host, "--query-gpu=persistence_mode", "--format=csv,noheader").stdout == "Enabled\n"


def test_the_gpu_model_comes_from_the_hosts_profile(repo: RepoInfo, tmp_path: Path) -> None:
    host = StandinRoot(tmp_path / "root", repo, HostTraits(gpu=RTX_4090))
    host.unpack(OLD, *DRIVER)
    host.reboot()
    assert smi(host, *PROBE_QUERY).stdout == "NVIDIA GeForce RTX 4090, 580.95.05, 8.9, 24564\n"
    assert smi(host, "--query-gpu=pci.device_id", "--format=csv,noheader").stdout == "0x268410DE\n"


def test_a_desktop_on_the_gpu_is_listed_as_real_nvidia_smi_lists_it_and_the_probe_reads_it(
        repo: RepoInfo, tmp_path: Path) -> None:
    desktop = replace(RTX_5090_LAPTOP, memory_used_mib=3210,
                      graphics_processes="1248:/usr/lib/xorg/Xorg:2800;1535:/usr/bin/gnome-shell:410")
    host = StandinRoot(tmp_path / "root", repo, HostTraits(gpu=desktop))
    host.unpack(OLD, *DRIVER)
    host.reboot()
    used, processes = parse_nvidia_smi_pids(smi(host, "-q", "-d", "PIDS,MEMORY").stdout)
    assert used == (3210,)
    assert [(p.pid, p.type, p.name, p.used_mib) for p in processes] == [
        (1248, "G", "/usr/lib/xorg/Xorg", 2800), (1535, "G", "/usr/bin/gnome-shell", 410)]


def test_the_built_in_default_is_the_rtx_5090_laptop_profile(host: StandinRoot) -> None:
    host.reboot()
    default = smi(host, "-q").stdout
    host.write("/etc/nvidia-standin/gpu.json", RTX_5090_LAPTOP.to_json())
    assert strip_timestamps(smi(host, "-q").stdout) == strip_timestamps(default)
    assert "Device Id                                      : 0x2C5810DE" in default


def strip_timestamps(text: str) -> str:
    lines = text.split("\n")
    return "\n".join(line for line in lines if not line.startswith(("Timestamp", "Mon ", "Tue ", "Wed ", "Thu ",
                                                                    "Fri ", "Sat ", "Sun ")))


@pytest.fixture
def h200_capture_host(tmp_path: Path, repo: RepoInfo) -> StandinRoot:
    """The H200 host of the captures: driver 580.159.04 loaded, persistence on."""
    host = StandinRoot(tmp_path / "root", repo, HostTraits(gpu=H200, intel_igpu=False))
    script = render("nvidia-smi", SMI_VERSION="580.159.04", CUDA_VERSION="13.0",
                    DEFAULT_PROFILE=RTX_5090_LAPTOP.to_json().strip(), VALID_FIELDS=" ".join(query_gpu_fields()))
    host.write("/usr/bin/nvidia-smi", script, 0o755)
    host.write("/usr/lib/x86_64-linux-gnu/nvidia-standin/libnvidia-ml.so.1", "580.159.04\n")
    host.write("/run/nvidia-standin/loaded-version", "580.159.04\n")
    host.write("/run/nvidia-standin/loaded-flavour", "open\n")
    host.write("/run/nvidia-standin/persistence-mode", "Enabled\n")
    return host


@pytest.mark.parametrize(("args", "capture"), [
    ((), "nvidia-smi.txt"),
    (("-L",), "nvidia-smi-L.txt"),
    (("-q",), "nvidia-smi-q.txt"),
    (("--query-gpu=index,name,uuid,pci.bus_id,pci.device_id,driver_version,compute_cap,memory.total,"
      "memory.used,memory.free,persistence_mode,power.limit,power.max_limit,temperature.gpu,clocks.max.sm,"
      "vbios_version", "--format=csv"), "query.csv"),
    (PROBE_QUERY, "query-noheader.csv"),
])
def test_output_matches_the_recorded_h200_captures(h200_capture_host: StandinRoot, args: tuple[str, ...],
                                                   capture: str) -> None:
    result = smi(h200_capture_host, *args)
    assert result.returncode == 0
    assert strip_timestamps(result.stdout) == strip_timestamps((CAPTURES / capture).read_text())


def test_csv_takes_any_subset_with_units_header_and_aliases(host: StandinRoot) -> None:
    host.reboot()
    result = smi(host, "--query-gpu=gpu_name,memory.used,power.limit,fan.speed,clocks.max.mem", "--format=csv")
    assert result.stdout == ("gpu_name, memory.used [MiB], power.limit [W], fan.speed [%], clocks.max.mem [MHz]\n"
                             "NVIDIA GeForce RTX 5090 Laptop GPU, 0 MiB, 150.00 W, [N/A], 14001 MHz\n")
    nounits = smi(host, "--query-gpu=memory.free,pci.device_id,index", "--format=csv,nounits")
    assert nounits.stdout == "memory.free [MiB], pci.device_id, index\n24118, 0x2C5810DE, 0\n"
    unsimulated = smi(host, "--query-gpu=inforom.oem", "--format=csv,noheader")
    assert unsimulated.stdout == "[N/A]\n"


def test_bad_arguments_fail_before_the_driver_is_asked(host: StandinRoot) -> None:
    bad_field = smi(host, "--query-gpu=name,bogus", "--format=csv")
    assert (bad_field.returncode, bad_field.stdout) == (2, 'Field "bogus" is not a valid field to query.\n\n')
    assert smi(host, "--query-gpu=name").returncode == 2  # --format is required
    assert smi(host, "--frobnicate").returncode == 2

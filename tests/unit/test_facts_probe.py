"""The probe script itself, run locally with stand-in commands, and gather_facts over a connection."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from provision.connection.base import CommandResult, wrap_script
from provision.errors import CommandFailed
from provision.facts import gather_facts, parse_probe, probe_script, split_sections
from provision.facts.model import AptSourceLine
from provision.facts.probe import probe_script as _probe_script

RECORDED = Path(__file__).parent / "fixtures" / "recorded"
KNOWN_SECTIONS = {
    "os-release", "kernel", "boot-id", "reboot-marker", "cpus", "meminfo", "disk-free", "systemd", "docker",
    "pci-nvidia", "nvidia-smi", "nvidia-smi-rc", "nvidia-proc-version", "nvidia-module-version", "nouveau",
    "secure-boot", "prime-select", "cloud-init", "dpkg-lock",
}
NOT_LOADED = ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
              "Make sure that the latest NVIDIA driver is installed and running.")

pytestmark = pytest.mark.skipif(shutil.which("bash") is None or not Path("/proc").is_dir(),
                                reason="the probe needs bash on Linux")


def stub_commands(folder: Path, scripts: dict[str, str]) -> dict[str, str]:
    """Stand-in commands on PATH (the probe prefers the caller's PATH to the system folders)."""
    folder.mkdir()
    for name, body in scripts.items():
        path = folder / name
        path.write_text(f"#!/bin/sh\n{body}\n")
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return {**os.environ, "PATH": f"{folder}:{os.environ['PATH']}"}


def run_wrapped(script: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Run as the SSH connection does: `bash -s` on stdin, after `set -euo pipefail`."""
    return subprocess.run(["bash", "-s"], input=wrap_script(script, None), env=env, capture_output=True,
                          text=True, timeout=30, check=False)


def test_probe_survives_strict_mode_and_leaves_appended_sections_running(tmp_path: Path) -> None:
    env = stub_commands(tmp_path / "bin", {
        "nvidia-smi": f'echo "{NOT_LOADED}"; exit 9',
        "docker": "echo 'Cannot connect to the Docker daemon' >&2; exit 1",
        "mokutil": "echo 'SecureBoot enabled'",
        "prime-select": "cat >/dev/null; echo on-demand",  # reading stdin must not eat the script
    })
    appended = "printf '@@task 1\\n'; echo still-running; false; echo not-reached\n"
    result = run_wrapped(probe_script() + appended, env)
    sections = split_sections(result.stdout)
    assert sections.keys() >= KNOWN_SECTIONS
    assert sections["task 1"] == "still-running"  # the caller's `set -e` is back in force after the probe
    facts = parse_probe(result.stdout)
    assert facts.nvidia_smi_rc == 9 and facts.nvidia_smi_error == NOT_LOADED
    assert facts.docker_client is True and facts.docker_version is None
    assert facts.secure_boot == "enabled" and facts.prime_profile == "on-demand"
    assert facts.kernel == os.uname().release and facts.cpus == os.cpu_count()
    assert facts.free_bytes("/") is not None


def test_probe_reads_a_working_nvidia_smi(tmp_path: Path) -> None:
    env = stub_commands(tmp_path / "bin", {
        "nvidia-smi": 'echo "0, NVIDIA GeForce RTX 5090 Laptop GPU, 0x2C5810DE, 580.95.05, 12.0, 24463"',
        "docker": "echo 28.5.1",
    })
    facts = parse_probe(run_wrapped(probe_script(), env).stdout)
    assert facts.nvidia_smi_ok and facts.gpus[0].compute_cap == "12.0" and facts.driver_version == "580.95.05"
    assert facts.docker_version == "28.5.1"


def test_probe_script_is_built_from_the_packaged_files() -> None:
    root = Path(__file__).parents[2] / "provision"
    for packaged in (root / "facts" / "probe.sh", root / "facts" / "fcntl_lock.sh", root / "gpu" / "probe.sh"):
        assert packaged.read_text() in _probe_script()


class RecordingConnection:
    """A Connection that answers every run with one canned result and records what it was given."""

    host_name = "laptop"
    round_trips = 0

    def __init__(self, result: CommandResult) -> None:
        self.result = result
        self.calls: list[tuple[str, bool]] = []

    def run(self, script: str, *, sudo: bool = True, **_: object) -> CommandResult:
        self.calls.append((script, sudo))
        self.round_trips += 1
        return self.result


def test_gather_facts_is_one_sudo_round_trip() -> None:
    fixture = Path(__file__).parent / "fixtures" / "facts" / "h200-driver580.txt"
    conn = RecordingConnection(CommandResult(stdout=fixture.read_text(), stderr="", rc=0))
    facts = gather_facts(conn)  # type: ignore[arg-type]
    assert conn.calls == [(probe_script(), True)]
    assert facts.gpus[0].name == "NVIDIA H200"


def test_gather_facts_names_the_host_and_stderr_when_nothing_came_back() -> None:
    conn = RecordingConnection(CommandResult(stdout="", stderr="sudo: a password is required\n", rc=1))
    with pytest.raises(CommandFailed) as raised:
        gather_facts(conn)  # type: ignore[arg-type]
    message = str(raised.value)
    assert "host laptop" in message and "sudo: a password is required" in message and "exit code 1" in message


def test_only_nvidias_apt_sources_are_listed_as_nvidia_sources(tmp_path: Path) -> None:
    # the real H200's Ubuntu 24.04 ubuntu.sources, copied from the host (its lines were listed as NVIDIA
    # sources: tests/unit/fixtures/facts/h200-driver580-nopackages.txt, issue 21 item 10) beside the
    # entry cuda-keyring writes
    lists = tmp_path / "apt" / "sources.list.d"
    lists.mkdir(parents=True)
    (lists / "ubuntu.sources").write_text((RECORDED / "apt_sources" / "ubuntu2404-h200.sources").read_text())
    cuda = ("deb [signed-by=/usr/share/keyrings/cuda-archive-keyring.gpg] "
            "https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2404/x86_64/ /")
    (lists / "cuda-ubuntu2404-x86_64.list").write_text(cuda + "\n")
    script = "PROBE_SECTIONS=apt-sources\n" + probe_script().replace("/etc/apt/", f"{tmp_path}/apt/")
    result = run_wrapped(script, dict(os.environ))
    assert parse_probe(result.stdout).nvidia_apt_sources == (
        AptSourceLine(path=f"{lists}/cuda-ubuntu2404-x86_64.list", line=cuda),)


def test_the_probe_for_some_sections_carries_only_their_functions_and_prints_what_the_whole_one_does(
        tmp_path: Path) -> None:
    """The trimmed probe (the sections asked for, the functions they call, no comments) against the
    whole probe, on this machine with the same stand-ins: the same sections, the same text (but the
    counters that move between two runs)."""
    from provision.facts.sections import registry

    smi = "echo '0, NVIDIA GeForce RTX 5090, 0x2B85, 575.64, 12.0, 32607'"
    env = stub_commands(tmp_path / "bin", {"nvidia-smi": smi, "mokutil": "echo 'SecureBoot enabled'"})
    names = tuple(section.name for section in registry().sections)
    trimmed, whole = (split_sections(run_wrapped(f"PROBE_SECTIONS='{' '.join(names)}'\n{script}", env).stdout)
                      for script in (_probe_script(names), probe_script()))
    moving = {"meminfo", "disk-free", "sessions"}
    assert trimmed.keys() == whole.keys() >= KNOWN_SECTIONS
    assert {k: v for k, v in trimmed.items() if k not in moving} == {k: v for k, v in whole.items() if k not in moving}
    one = _probe_script(("nvidia-packages",))
    assert "probe_nvidia_packages() {" in one and "probe_nvidia_smi" not in one and "probe_os_release" not in one
    assert not [line for line in one.splitlines() if line.lstrip().startswith("#")]
    assert len(one) < len(probe_script()) / 4

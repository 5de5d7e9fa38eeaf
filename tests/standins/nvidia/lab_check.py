"""End-to-end check of the stand-in NVIDIA stack on real lab hosts (not part of the unit tests).

    python -m tests.standins.nvidia.lab_check [--lab-dir /tmp/standin-nvidia-lab] [--keep]

Host 1 (RTX 5090 Laptop, no traits) goes the whole way a provisioning run goes, by hand: cuda-keyring
from the served repo, apt, the open driver, nvidia-smi failing until reboot, modprobe, an upgrade's
version mismatch, docker, the container toolkit, daemon.json, `docker run --gpus all`. Host 2 carries
the traits (Secure Boot on, nouveau at boot) and checks the module refuses to load and the blacklist
plus reboot clears nouveau. Each step prints ok/FAIL; the exit code is the number of failures.
"""

from __future__ import annotations

import argparse
import base64
import shlex
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from tests.lab.host import Bind, LabHost
from tests.lab.lab import Lab
from tests.lab.net import MACHINE_FROM_HOSTS, free_port

from .host_traits import HostTraits, host_traits_files, host_traits_mounts
from .repo import build_repo, serve

APT = "DEBIAN_FRONTEND=noninteractive apt-get -y -q -o DPkg::Lock::Timeout=600"
TEST_IMAGE = "standin-nvidia/busybox:probe"


class Checker:
    """Runs commands on a host and records each expectation's outcome."""

    def __init__(self) -> None:
        self.failures = 0

    def expect(self, what: str, ok: bool, detail: str = "") -> None:
        print(f"{'ok  ' if ok else 'FAIL'} {what}" + ("" if ok else f"\n     {detail.strip()[-1500:]}"), flush=True)
        self.failures += not ok

    def run(self, host: LabHost, command: str, what: str, rc: int = 0,
            contains: str | Callable[[str], bool] = "") -> str:
        started = time.monotonic()
        code, output = host.exec(command)
        test = contains if callable(contains) else (lambda text: contains in text)
        self.expect(f"{host.name}: {what} ({time.monotonic() - started:.1f} s)", code == rc and test(output),
                    f"rc={code} (want {rc})\n{output}")
        return output


def reboot(host: LabHost) -> None:
    """Reboot inside and wait until the lab's supervisor has brought the host back."""
    before = host.container.attrs["State"]["StartedAt"]
    host.exec("systemctl reboot")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        time.sleep(0.5)
        try:
            if host.container.attrs["State"]["StartedAt"] != before and host.container.status == "running":
                break
        except Exception:  # the container may be between states
            continue
    host.wait_for_ssh()
    host.exec("systemctl is-system-running --wait >/dev/null 2>&1 || true")


def write_files(host: LabHost, traits: HostTraits) -> None:
    for item in host_traits_files(traits):
        data = base64.b64encode(item.content).decode()
        host.exec(f"mkdir -p {shlex.quote(str(Path(item.path).parent))} && echo {data} | base64 -d > "
                  f"{shlex.quote(item.path)} && chmod {item.mode:o} {shlex.quote(item.path)}")


def load_image(host: LabHost, image: str) -> None:
    """Copy IMAGE from this machine's docker into the host's (no registry needed)."""
    subprocess.run(f"docker save {image} | docker exec -i {host.container_name} docker load -q",
                   shell=True, check=True, capture_output=True)


def check_driver_and_toolkit(check: Checker, host: LabHost, base: str, image: str) -> None:
    cuda = f"{base}/cuda/repos/debian12/x86_64"
    check.run(host, "cat /sys/bus/pci/devices/*/vendor | sort | tr '\\n' ' '", "fake PCI tree visible",
              contains="0x10de")
    check.run(host, f"curl -fsSLo /tmp/k.deb {cuda}/cuda-keyring_1.1-1_all.deb && dpkg -i /tmp/k.deb && "
              f"{APT} update", "cuda-keyring + apt-get update", contains="InRelease")
    check.run(host, f"{APT} install nvidia-driver-cuda=580.95.05-1 nvidia-kernel-open-dkms=580.95.05-1 "
              "nvidia-smi=580.95.05-1 libnvidia-ml1=580.95.05-1 nvidia-persistenced=580.95.05-1",
              "install the open driver 580.95.05", contains="Building initial module nvidia/580.95.05")
    check.run(host, "dpkg -l nvidia-kernel-dkms cuda-drivers 2>&1 | grep -c '^ii' || true",
              "proprietary module and cuda-drivers not installed", contains=lambda o: o.strip() == "0")
    check.run(host, "nvidia-smi", "nvidia-smi before reboot", rc=9, contains="couldn't communicate")
    check.run(host, "modprobe nvidia && nvidia-smi -L && cat /sys/module/nvidia/version /proc/driver/nvidia/version",
              "modprobe nvidia loads the stand-in module", contains="Open Kernel Module for x86_64  580.95.05")
    check.run(host, "modprobe -r nvidia && nvidia-smi", "modprobe -r unloads it", rc=9)
    reboot(host)
    check.run(host, "nvidia-smi --query-gpu=name,driver_version,compute_cap,memory.total "
              "--format=csv,noheader,nounits", "nvidia-smi after reboot",
              contains="NVIDIA GeForce RTX 5090 Laptop GPU, 580.95.05, 12.0, 24463")
    check.run(host, "systemctl enable --now nvidia-persistenced && nvidia-smi -q | grep 'Persistence Mode'",
              "persistenced turns persistence mode on", contains="Enabled")
    check.run(host, f"{APT} install nvidia-open && nvidia-smi", "upgrade via nvidia-open: mismatch", rc=18,
              contains="NVML library version: 580.105")
    check.run(host, "dpkg -l nvidia-kernel-open-dkms | grep ^ii", "nvidia-open kept the open flavour",
              contains="580.105.08-1")
    reboot(host)
    check.run(host, "nvidia-smi | sed -n 3p", "new driver after reboot", contains="Driver Version: 580.105.08")
    check.run(host, f"{APT} install docker.io >/dev/null", "install docker.io")
    load_image(host, image)
    check.run(host, f"docker run --rm --gpus all {image} true 2>&1", "docker --gpus all fails without the toolkit",
              rc=125, contains="could not select device driver")
    tk = "1.17.8-1"
    container = f"{base}/libnvidia-container"
    check.run(host, f"curl -fsSL {container}/gpgkey | gpg --dearmor -o "
              "/usr/share/keyrings/nvidia-container-toolkit-keyring.gpg && "
              f"curl -fsSL {container}/stable/deb/nvidia-container-toolkit.list > "
              "/etc/apt/sources.list.d/nvidia-container-toolkit.list && "
              f"{APT} update && {APT} install nvidia-container-toolkit={tk} nvidia-container-toolkit-base={tk} "
              f"libnvidia-container-tools={tk} libnvidia-container1={tk}", "install the container toolkit",
              contains="Setting up nvidia-container-toolkit (1.17.8-1)")
    check.run(host, "echo '{\"log-driver\": \"json-file\"}' > /etc/docker/daemon.json && "
              "nvidia-ctk runtime configure --runtime=docker && cat /etc/docker/daemon.json",
              "nvidia-ctk merges daemon.json", contains='"nvidia": {\n            "args": [],')
    check.run(host, "systemctl restart docker && "
              f"docker run --rm --gpus all {image} nvidia-smi -L", "docker run --gpus all nvidia-smi",
              contains="GPU 0: NVIDIA GeForce RTX 5090 Laptop GPU")
    check.run(host, f"docker run --rm --runtime=nvidia -e NVIDIA_VISIBLE_DEVICES=all {image} "
              "nvidia-smi --query-gpu=driver_version --format=csv,noheader", "--runtime=nvidia works too",
              contains="580.105.08")
    check.run(host, f"docker run --rm {image} sh -c 'command -v nvidia-smi || echo none'",
              "a container without --gpus has no nvidia-smi", contains="none")


def check_traits(check: Checker, host: LabHost, base: str) -> None:
    cuda = f"{base}/cuda/repos/debian12/x86_64"
    check.run(host, "mokutil --sb-state; od -An -tu1 /sys/firmware/efi/efivars/SecureBoot-*",
              "Secure Boot visible to mokutil and efivars", contains="SecureBoot enabled")
    reboot(host)  # the nouveau unit was written after the first boot
    check.run(host, "test -d /sys/module/nouveau && echo loaded", "nouveau loaded at boot", contains="loaded")
    check.run(host, f"curl -fsSLo /tmp/k.deb {cuda}/cuda-keyring_1.1-1_all.deb && dpkg -i /tmp/k.deb && "
              # an older release needs every package pinned: the metas' exact dependencies would
              # otherwise ask for the newest versions of the others (as with NVIDIA's real repo)
              f"{APT} update && {APT} install nvidia-open=580.95.05-1 nvidia-kernel-open-dkms=580.95.05-1 "
              "nvidia-driver-cuda=580.95.05-1 nvidia-smi=580.95.05-1 libnvidia-ml1=580.95.05-1 "
              "nvidia-persistenced=580.95.05-1", "install nvidia-open 580.95.05 (all pinned)")
    check.run(host, "modprobe nvidia", "modprobe refused while nouveau holds the GPU", rc=1,
              contains="No such device")
    host.exec("printf 'blacklist nouveau\\noptions nouveau modeset=0\\n' > /etc/modprobe.d/blacklist-nouveau.conf")
    reboot(host)
    check.run(host, "test -d /sys/module/nouveau || echo gone", "blacklist + reboot: nouveau gone", contains="gone")
    check.run(host, "modprobe nvidia", "Secure Boot rejects the unsigned module", rc=1,
              contains="Key was rejected by service")
    check.run(host, "systemctl --failed --no-legend | grep -c . || true", "no failed units",
              contains=lambda o: o.strip() == "0")


def ensure_test_image() -> None:
    """A tiny image of busybox-static applets (no registry here to pull one from)."""
    if subprocess.run(["docker", "image", "inspect", TEST_IMAGE], capture_output=True).returncode == 0:
        return
    script = (
        'set -e; d=$(mktemp -d); mkdir -p "$d/bin" "$d/usr/bin" "$d/etc" "$d/tmp" "$d/run" "$d/proc" "$d/sys" '
        '"$d/dev"; cp /bin/busybox "$d/bin/"; for a in $(/bin/busybox --list); do ln -sf busybox "$d/bin/$a"; '
        f'done; tar -C "$d" -c . | docker import - {TEST_IMAGE} >/dev/null; rm -rf "$d"'
    )
    subprocess.run(["sh", "-c", script], check=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lab-dir", type=Path, default=Path("/tmp/standin-nvidia-lab"))
    parser.add_argument("--keep", action="store_true", help="leave the lab up afterwards")
    args = parser.parse_args()
    port = free_port(18765, set())
    base = f"http://{MACHINE_FROM_HOSTS}:{port}"
    info = build_repo(args.lab_dir / "repo", base)
    check = Checker()
    lab = Lab(args.lab_dir / "lab")
    with serve(info.out_dir, port):
        lab.start()
        ensure_test_image()
        plain_traits = HostTraits()
        trait_host_traits = HostTraits(secure_boot=True, nouveau_at_boot=True)
        binds = {name: [Bind(str(m.source), m.target, m.read_only)
                        for m in host_traits_mounts(traits, args.lab_dir / name)]
                 for name, traits in (("gpu1", plain_traits), ("gpu2", trait_host_traits))}
        try:
            plain = lab.new_host("gpu1", binds=binds["gpu1"])
            traits = lab.new_host("gpu2", binds=binds["gpu2"])
            write_files(plain, plain_traits)
            write_files(traits, trait_host_traits)
            check_traits(check, traits, base)
            check_driver_and_toolkit(check, plain, base, TEST_IMAGE)
        finally:
            if not args.keep:
                lab.down()
    print(f"{check.failures} failure(s)")
    return check.failures


if __name__ == "__main__":
    raise SystemExit(main())

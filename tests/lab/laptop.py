"""`python -m tests.lab up --laptop`: one simulated RTX 5090 laptop to run the whole tool on by hand.

A fresh lab host with the stand-in GPU traits, the stand-in NVIDIA repositories and Hugging Face hub
served from this machine, the stand-in vLLM image in the lab registry, and `DIR/laptop.yaml`: the
inventory an office with its own mirrors would write. The repositories and the hub are served by
this process: it stays in the foreground until Ctrl-C (the host stays until `python -m tests.lab down`).
"""

from __future__ import annotations

import base64
import secrets
import shlex
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from tests.lab import mirror
from tests.lab.host import Bind, LabHost
from tests.lab.lab import Lab
from tests.lab.net import MACHINE_FROM_HOSTS, free_port
from tests.standins.hub.cli import start_hub
from tests.standins.hub.server import HubOptions
from tests.standins.nvidia import HostTraits, build_repo, host_traits_files, host_traits_mounts, serve
from tests.standins.nvidia.repo import RepoInfo
from tests.standins.vllm.build import build_images

CHECK_IMAGE = "standin-gpu-check:1"
FIRST_REPO_PORT = 18865
MODEL_REPO = "cyankiwi/gemma-4-26B-A4B-it-AWQ-4bit"


def check_image(lab: Lab, workdir: Path) -> str:
    """A busybox image with every applet (the stand-in nvidia-smi is a shell script that needs sed,
    tr, cut, ...), pushed to the lab registry; returns the reference hosts pull it by."""
    root = workdir / "root"
    for folder in ("bin", "etc", "tmp", "proc", "sys", "dev", "run", "usr/bin"):
        (root / folder).mkdir(parents=True, exist_ok=True)
    busybox = root / "bin/busybox"
    busybox.write_bytes(Path("/bin/busybox").read_bytes())
    busybox.chmod(0o755)
    applets = subprocess.run([str(busybox), "--list"], capture_output=True, text=True, check=True).stdout.split()
    for applet in applets:
        link = root / "bin" / applet
        if not link.exists():
            link.symlink_to("busybox")
    archive = workdir / "image.tar"
    subprocess.run(["tar", "-C", str(root), "-cf", str(archive), "."], check=True)
    subprocess.run(["docker", "import", str(archive), f"provision-test/{CHECK_IMAGE}"], check=True,
                   capture_output=True)
    return lab.registry.push(f"provision-test/{CHECK_IMAGE}", CHECK_IMAGE)


def gpu_laptop(lab: Lab, workdir: Path, traits: HostTraits, prefix: str = "laptop",
               suite: str = "bookworm", offline: bool = False, extra_ports: Sequence[int] = ()) -> LabHost:
    """A fresh lab host (Debian `suite`) with the simulated hardware of `traits` written in before its
    first use; `offline`: its egress allows only its SSH server's replies; `extra_ports`: guest ports
    forwarded from 127.0.0.1 too (see Lab.new_host)."""
    binds = [Bind(str(m.source), m.target, m.read_only) for m in host_traits_mounts(traits, workdir)]
    host = lab.new_host(prefix=prefix, binds=binds, suite=suite, offline=offline, extra_ports=extra_ports)
    for item in host_traits_files(traits):
        data = base64.b64encode(item.content).decode()
        path = shlex.quote(item.path)
        rc, out = host.exec(f"mkdir -p $(dirname {path}) && echo {data} | base64 -d > {path} && "
                            f"chmod {item.mode:o} {path}")
        if rc != 0:
            raise RuntimeError(f"writing {item.path} on {host.name}: {out}")
    return host


def laptop_variables(lab: Lab, repo: RepoInfo, checker: str, hf_endpoint: str, token: str,
                     image: str) -> dict[str, Any]:
    """The inventory variables of a lab laptop: the stand-in NVIDIA repositories `repo`, the GPU check
    image `checker`, the hub at `hf_endpoint` with `token`, the vLLM `image`."""
    return {
        "nvidia_cuda_repo_base": repo.cuda_repos_base, "nvidia_container_repo_base": repo.container_toolkit_base,
        "nvidia_kernel_headers": {"debian": [], "ubuntu": []}, "nvidia_dkms_packages": [],
        "docker_insecure_registries": [lab.registry.address_for_hosts], "container_toolkit_check_image": checker,
        "container_toolkit_check_cuda": False, "hf_endpoint": hf_endpoint, "hf_token": token,
        "office_cache_trusted": True, "vllm_image": image, "vllm_ready_timeout": 300}


def up_laptop(lab: Lab) -> None:
    started = time.monotonic()
    lab.start()
    work = lab.dir / "laptop"
    work.mkdir(parents=True, exist_ok=True)
    print("building the stand-in vLLM image and the GPU check image ...", flush=True)
    images = build_images(f"127.0.0.1:{lab.registry.port}", pull_registry=lab.registry.address_for_hosts,
                          behaviours=("ok",), log=lambda _: None)
    checker = check_image(lab, work)
    port = free_port(FIRST_REPO_PORT, set())
    repo = build_repo(work / "nvidia-repo", f"http://{MACHINE_FROM_HOSTS}:{port}")
    repo_server = serve(repo.out_dir, port)
    token = "hf_standin_" + secrets.token_hex(12)
    hub = start_hub(work / "hub", repo_id=MODEL_REPO, options=HubOptions(token=token))
    host = gpu_laptop(lab, work / "traits", HostTraits(nouveau_at_boot=False))
    inventory = lab.write_inventory(lab.dir / "laptop.yaml", [host], **laptop_variables(
        lab, repo, checker, f"http://{MACHINE_FROM_HOSTS}:{hub.server.server_address[1]}", token, images["ok"]))
    print(f"\nlaptop {host.name} up in {time.monotonic() - started:.0f} s; inventory {inventory}:")
    shown = {**yaml.safe_load(inventory.read_text())["all"]["vars"], "hf_token": "*** (in the file)"}
    print(yaml.safe_dump(shown, sort_keys=False))
    print(f"in another shell:\n  provision up {inventory}\n  provision status {inventory}\n"
          f"  provision bench {inventory} --runs 3 --max-tokens 200\n"
          f"  provision up {inventory} -e max_num_seqs=3    # an upgrade\n  provision rollback {inventory}")
    print(f"Ctrl-C stops the repositories and the hub; `python -m tests.lab down --dir {lab.dir}` the host.",
          flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        hub.stop()
        repo_server.stop()


# Ubuntu 24.04.3's /etc/os-release, as recorded on a laptop (tests/unit/fixtures/facts/rtx5090-laptop-ubuntu2404.txt)
UBUNTU_OS_RELEASE = """PRETTY_NAME="Ubuntu 24.04.3 LTS"
NAME="Ubuntu"
VERSION_ID="24.04"
VERSION="24.04.3 LTS (Noble Numbat)"
VERSION_CODENAME=noble
ID=ubuntu
ID_LIKE=debian
HOME_URL="https://www.ubuntu.com/"
SUPPORT_URL="https://help.ubuntu.com/"
BUG_REPORT_URL="https://bugs.launchpad.net/ubuntu/"
PRIVACY_POLICY_URL="https://www.ubuntu.com/legal/terms-and-policies/privacy-policy"
UBUNTU_CODENAME=noble
LOGO=ubuntu-logo
"""
# /etc/apt/sources.list.d/ubuntu.sources as 24.04's installer writes it (URIs and Signed-By as recorded on
# the H200 host, tests/unit/fixtures/facts/h200-driver580-nopackages.txt), the archive's port added; the
# stand-in has no universe/multiverse (apt skips a component a Release lacks) and no -backports
UBUNTU_SOURCES = """Types: deb
URIs: http://archive.ubuntu.com:{port}/ubuntu/
Suites: noble noble-updates
Components: main restricted universe multiverse
Signed-By: /usr/share/keyrings/ubuntu-archive-keyring.gpg

Types: deb
URIs: http://security.ubuntu.com:{port}/ubuntu/
Suites: noble-security
Components: main restricted universe multiverse
Signed-By: /usr/share/keyrings/ubuntu-archive-keyring.gpg
"""
# Ubuntu's stock unattended-upgrades origins (its 50unattended-upgrades: the release and -security;
# -updates commented out), spelled out: the lab's Debian lsb_release may not answer ${distro_id} as Ubuntu
UBUNTU_UNATTENDED = """Unattended-Upgrade::Allowed-Origins {
        "Ubuntu:noble";
        "Ubuntu:noble-security";
};
"""
# The lab's stand-in boot loader: GRUB boots the newest installed kernel (GRUB_DEFAULT=0 and
# /etc/grub.d/10_linux's version sort); the lab shares this machine's kernel, so "booting" one is
# recording its release where the stand-in module loader looks (tests/standins/ubuntu/packages.py)
STANDIN_BOOT = """#!/bin/sh
# STAND-IN boot loader of the provision test lab: "boots" the newest installed kernel, as GRUB would.
newest=$(ls /boot | sed -n 's/^vmlinuz-//p' | sort -V | tail -n 1)
mkdir -p /run/ubuntu-standin
printf '%s\\n' "$newest" > /run/ubuntu-standin/booted-kernel
"""
STANDIN_BOOT_UNIT = """[Unit]
Description=Boot the newest installed kernel (stand-in boot loader of the provision test lab)
DefaultDependencies=no
After=local-fs.target
Before=sysinit.target nvidia-standin-modload.service

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/usr/lib/ubuntu-standin/boot

[Install]
WantedBy=sysinit.target
"""


def ubuntu_laptop(lab: Lab, workdir: Path, traits: HostTraits, archive_port: int, keyring: bytes,
                  prefix: str = "noble") -> LabHost:
    """A lab laptop that looks like Ubuntu 24.04 to the tool: Ubuntu's os-release and apt sources, fed by
    the stand-in archive (tests/standins/ubuntu, served on `archive_port` of this machine and signed by
    `keyring`), the generic-hwe-24.04 kernel of its current month installed and booted, and
    unattended-upgrades (Debian's package) taking Ubuntu's origins. Underneath it is Debian bookworm: its
    own archive stays in its sources for what Ubuntu's stand-in does not carry (docker.io, ...)."""
    host = gpu_laptop(lab, workdir, traits, prefix)
    files = {
        "/usr/lib/os-release": UBUNTU_OS_RELEASE, "/etc/apt/sources.list.d/ubuntu.sources":
        UBUNTU_SOURCES.format(port=archive_port),
        "/etc/apt/apt.conf.d/51lab-ubuntu-origins": UBUNTU_UNATTENDED,
        "/usr/lib/ubuntu-standin/boot": STANDIN_BOOT,
        "/etc/systemd/system/ubuntu-standin-boot.service": STANDIN_BOOT_UNIT,
    }
    script = [f"printf '%s\\n' '{MACHINE_FROM_HOSTS} archive.ubuntu.com security.ubuntu.com' >> /etc/hosts",
              "rm -f /etc/os-release && ln -s ../usr/lib/os-release /etc/os-release",
              f"echo {base64.b64encode(keyring).decode()} | base64 -d > /usr/share/keyrings/ubuntu-archive-keyring.gpg"]
    for path, text in files.items():
        data = base64.b64encode(text.encode()).decode()
        script.append(f"mkdir -p $(dirname {path}) && echo {data} | base64 -d > {path}")
    script += ["chmod 755 /usr/lib/ubuntu-standin/boot",
               "systemctl daemon-reload && systemctl enable -q --now ubuntu-standin-boot.service",
               "apt-get update -qq",
               # kmod (modprobe) is of priority important on Ubuntu, always there; the lab's Debian image lacks it
               "DEBIAN_FRONTEND=noninteractive apt-get install -y -qq kmod unattended-upgrades linux-generic-hwe-24.04",
               "systemctl restart ubuntu-standin-boot.service"]  # the laptop has booted its kernel
    rc, out = host.exec(" && ".join(script))
    if rc != 0:
        raise RuntimeError(f"making {host.name} Ubuntu-shaped: {out[-3000:]}")
    return host


# Debian's security suite (bookworm- or trixie-security) as the stand-in archive serves it
# (tests/standins/debian); the lab's own Debian mirror stays in debian.sources under its own name for
# everything else
DEBIAN_SECURITY_SOURCES = """Types: deb
URIs: http://security.debian.org:{port}/debian-security/
Suites: {suite}-security
Components: main
Signed-By: /usr/share/keyrings/standin-debian-security.gpg
"""

# In this lab Debian's kernels are the stand-in's: the real mirror's (live, newer) kernel packages would
# win by version and pull real headers of tens of MB; they are kept out here, not by the tool
DEBIAN_KERNELS_FROM_STANDIN = """Package: linux-image-* linux-headers-* linux-kbuild-* linux-compiler-*
Pin: origin {host}
Pin-Priority: -1
"""

# The lab's Debian mirror is the live one: its updates since the lab image was built (apt, libpam,
# ca-certificates, ... in one walk) are not the month's subject and would make the walk depend on the
# day it runs. Only the kernels are unattended-upgrades' to take here; its origins stay Debian's stock ones.
# Strict: without it, Debian 12's unattended-upgrades (2.9.1) also took the 24 other pending security
# updates of the live mirror (apt, libssl3, python3.11, ... each its own dpkg step: 60 s of the walk's 76 s);
# the strict whitelist allows only packages that match it (unattended-upgrades' README,
# Unattended-Upgrade::Package-Whitelist-Strict), and every kernel package's name starts with linux-
DEBIAN_UNATTENDED_LAB = """Unattended-Upgrade::Package-Whitelist {
        "linux-";
};
Unattended-Upgrade::Package-Whitelist-Strict "true";
"""


def debian_laptop(lab: Lab, workdir: Path, traits: HostTraits, archive_port: int, keyring: bytes,
                  prefix: str = "deb12", suite: str = "bookworm") -> LabHost:
    """A Debian 12 (or 13: `suite="trixie"`) lab laptop whose kernels come from the stand-in security archive
    (tests/standins/debian, served on `archive_port` of this machine and signed by `keyring`): the amd64
    kernel of its current month installed and booted by the stand-in boot loader (the same as
    ubuntu_laptop's, recording in /run/kernel-standin, where the DKMS stand-in's loader looks), and
    unattended-upgrades with Debian's stock origins (its 50unattended-upgrades takes
    origin=Debian,codename=<suite>-security,label=Debian-Security), kernels only (DEBIAN_UNATTENDED_LAB)."""
    host = gpu_laptop(lab, workdir, traits, prefix, suite)
    boot = STANDIN_BOOT.replace("/run/ubuntu-standin", "/run/kernel-standin")
    unit = STANDIN_BOOT_UNIT.replace("/usr/lib/ubuntu-standin/boot", "/usr/lib/kernel-standin/boot")
    files = {
        "/etc/apt/sources.list.d/standin-debian-security.sources":
            DEBIAN_SECURITY_SOURCES.format(port=archive_port, suite=suite),
        "/etc/apt/preferences.d/lab-kernels-from-standin.pref": "\n".join(
            DEBIAN_KERNELS_FROM_STANDIN.format(host=host) for host in mirror.archive_hosts(mirror.machine_sources())),
        "/etc/apt/apt.conf.d/52lab-unattended-kernels-only": DEBIAN_UNATTENDED_LAB,
        "/usr/lib/kernel-standin/boot": boot,
        "/etc/systemd/system/kernel-standin-boot.service": unit,
    }
    key = base64.b64encode(keyring).decode()
    script = [f"printf '%s\\n' '{MACHINE_FROM_HOSTS} security.debian.org' >> /etc/hosts",
              f"echo {key} | base64 -d > /usr/share/keyrings/standin-debian-security.gpg"]
    for path, text in files.items():
        data = base64.b64encode(text.encode()).decode()
        script.append(f"mkdir -p $(dirname {path}) && echo {data} | base64 -d > {path}")
    script += ["chmod 755 /usr/lib/kernel-standin/boot",
               "systemctl daemon-reload && systemctl enable -q --now kernel-standin-boot.service",
               "apt-get update -qq",
               "DEBIAN_FRONTEND=noninteractive apt-get install -y -qq kmod unattended-upgrades linux-image-amd64",
               "systemctl restart kernel-standin-boot.service"]  # the laptop has booted its kernel
    rc, out = host.exec(" && ".join(script))
    if rc != 0:
        raise RuntimeError(f"making {host.name} a Debian laptop with stand-in kernels: {out[-3000:]}")
    return host

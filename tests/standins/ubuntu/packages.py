"""The stand-in packages of Ubuntu's archive: names, versions and Depends as Ubuntu's metadata has them
(SOURCES.md), payloads a few bytes that prove which kernel and which module are installed.

The kernel packages install /boot/vmlinuz-<release> and /lib/modules/<release>/ (what the lab's stand-in
boot loader picks from, see tests/lab/laptop.py); the signed module package installs
/lib/modules/<release>/kernel/nvidia-580-open/nvidia.ko holding "VERSION open signed": the 580 release it
was built against. nvidia-kernel-common-580 carries the lab's module loader (tests/standins/nvidia's,
reading the module of the booted kernel instead of one installed module).
"""

from __future__ import annotations

from tests.standins.nvidia.debs import DebSpec, PackageFile, PackageLink
from tests.standins.nvidia.gpu import RTX_5090_LAPTOP
from tests.standins.nvidia.payload import query_gpu_fields, render

from .catalogue import BRANCH, FLAVOUR, Kernel, driver_version

NOTE = "\n Stand-in of the provision test lab (tests/standins/ubuntu): not Ubuntu's package."
NVML_DIR = "/usr/lib/x86_64-linux-gnu/nvidia-standin"
BOOTED = "/run/ubuntu-standin/booted-kernel"  # written at boot by the lab's stand-in boot loader
MODULE_DIR = f"kernel/nvidia-{BRANCH}-open"


def kernel_packages(kernel: Kernel) -> list[DebSpec]:
    """linux-image/-modules/-headers of one ABI and, once published, its signed NVIDIA module."""
    release, version = kernel.release, kernel.version
    specs = [
        DebSpec(f"linux-image-{release}", version, f"Signed kernel image generic{NOTE}", section="kernel",
                depends=(f"linux-modules-{release} (= {version})",),
                files=(PackageFile(f"/boot/vmlinuz-{release}", f"stand-in kernel {release}\n".encode()),)),
        DebSpec(f"linux-modules-{release}", version, f"Linux kernel extra modules for version {kernel.abi}{NOTE}",
                section="kernel",
                files=(PackageFile(f"/lib/modules/{release}/modules.order", b""),
                       PackageFile(f"/boot/config-{release}", b"CONFIG_MODULE_SIG=y\n"))),
        DebSpec(f"linux-headers-{release}", version, f"Linux kernel headers for version {kernel.abi}{NOTE}",
                section="devel",
                files=(PackageFile(f"/usr/src/linux-headers-{release}/Makefile", b"# stand-in\n"),)),
    ]
    if kernel.with_nvidia:
        specs.append(DebSpec(
            f"linux-modules-nvidia-{BRANCH}-open-{release}", version,
            f"Linux kernel nvidia modules for version {kernel.abi}{NOTE}", section="restricted/kernel",
            depends=(f"linux-image-{release} | linux-image-unsigned-{release}",
                     f"nvidia-kernel-common-{BRANCH} (>= {kernel.with_nvidia})"),
            files=(PackageFile(f"/lib/modules/{release}/{MODULE_DIR}/nvidia.ko",
                               f"{kernel.with_nvidia} open signed\n".encode()),)))
    return specs


def flavour_metas(newest: Kernel, newest_with_module: Kernel) -> list[DebSpec]:
    """The generic-hwe-24.04 metas: the kernel's follow the newest ABI, the NVIDIA modules' the newest
    ABI whose signed module is published."""
    version, release = newest.version, newest.release
    nvidia_version, nvidia_release = newest_with_module.version, newest_with_module.release
    return [
        DebSpec(f"linux-{FLAVOUR}", version, f"Complete Generic Linux kernel and headers{NOTE}", section="kernel",
                depends=(f"linux-image-{FLAVOUR} (= {version})", f"linux-headers-{FLAVOUR} (= {version})")),
        DebSpec(f"linux-image-{FLAVOUR}", version, f"Generic Linux kernel image{NOTE}", section="kernel",
                depends=(f"linux-image-{release}",)),
        DebSpec(f"linux-headers-{FLAVOUR}", version, f"Generic Linux kernel headers{NOTE}", section="kernel",
                depends=(f"linux-headers-{release}",)),
        DebSpec(f"linux-modules-nvidia-{BRANCH}-open-{FLAVOUR}", nvidia_version,
                f"Extra drivers for nvidia-{BRANCH}-open for the generic-hwe-24.04 flavour{NOTE}",
                section="restricted/kernel",
                depends=(f"linux-modules-nvidia-{BRANCH}-open-{nvidia_release} (= {nvidia_version})",
                         f"nvidia-kernel-common-{BRANCH} (>= {newest_with_module.with_nvidia})")),
    ]


def modload() -> bytes:
    """The NVIDIA stand-in's module loader, reading the signed module of the booted kernel."""
    text = render("modload").decode()
    edits = {
        "INSTALLED=$ROOT/usr/lib/nvidia-standin/kernel-module":
            f'INSTALLED=$ROOT/lib/modules/$(cat "$ROOT{BOOTED}" 2>/dev/null)/{MODULE_DIR}/nvidia.ko',
        'read -r version flavour < "$INSTALLED"': 'read -r version flavour signed < "$INSTALLED"',
        # Canonical signs its prebuilt modules: they load with Secure Boot on
        'secure_boot_enabled && fail': '[ "$signed" != signed ] && secure_boot_enabled && fail',
    }
    for old, new in edits.items():
        if old not in text:
            raise ValueError(f"tests/standins/nvidia/payload/modload changed: no {old!r}")
        text = text.replace(old, new)
    return text.encode()


def driver_packages(release: str) -> list[DebSpec]:
    """nvidia-graphics-drivers-580's packages of one release that the headless signed path installs."""
    version = driver_version(release)
    exactly = f"(= {version})"
    unit = "nvidia-standin-modload.service"
    smi = render("nvidia-smi", SMI_VERSION=release, CUDA_VERSION="13.0",
                 DEFAULT_PROFILE=RTX_5090_LAPTOP.to_json().strip(), VALID_FIELDS=" ".join(query_gpu_fields()))
    return [
        DebSpec(f"nvidia-kernel-common-{BRANCH}", version, f"Shared files used with the kernel module{NOTE}",
                section="restricted/libs", provides=(f"nvidia-kernel-common-{BRANCH}-{release}",),
                files=(PackageFile("/usr/lib/nvidia-standin/modload", modload(), 0o755),
                       PackageFile("/lib/modprobe.d/nvidia-standin.conf", render("modprobe-nvidia.conf")),
                       PackageFile(f"/lib/systemd/system/{unit}", render(unit))),
                links=(PackageLink(f"/lib/systemd/system/sysinit.target.wants/{unit}", f"../{unit}"),)),
        DebSpec(f"nvidia-firmware-{BRANCH}-{release}", version, f"Firmware files used by the kernel module{NOTE}",
                section="restricted/kernel",
                files=(PackageFile(f"/lib/firmware/nvidia/{release}/gsp_ga10x.bin", b"stand-in\n"),)),
        DebSpec(f"libnvidia-compute-{BRANCH}", version, f"NVIDIA libcompute package{NOTE}", section="restricted/libs",
                depends=(f"nvidia-kernel-common-{BRANCH}-{release}",),
                files=(PackageFile(f"{NVML_DIR}/libnvidia-ml.so.{release}", f"{release}\nNVML stand-in\n".encode()),),
                links=(PackageLink(f"{NVML_DIR}/libnvidia-ml.so.1", f"libnvidia-ml.so.{release}"),)),
        DebSpec(f"nvidia-utils-{BRANCH}", version, f"NVIDIA driver support binaries{NOTE}", section="restricted/x11",
                depends=(f"libnvidia-compute-{BRANCH} {exactly}",),
                files=(PackageFile("/usr/bin/nvidia-smi", smi, 0o755),)),
        DebSpec(f"nvidia-compute-utils-{BRANCH}", version, f"NVIDIA compute utilities{NOTE}", section="restricted/libs",
                depends=(f"libnvidia-compute-{BRANCH} {exactly}",),
                files=(PackageFile("/usr/bin/nvidia-persistenced",
                                   render("nvidia-persistenced", DRIVER_VERSION=release), 0o755),
                       PackageFile("/lib/systemd/system/nvidia-persistenced.service",
                                   render("nvidia-persistenced.service")))),
        DebSpec(f"nvidia-headless-no-dkms-{BRANCH}-open", version,
                f"NVIDIA headless metapackage - no DKMS (open kernel module){NOTE}", section="restricted/libs",
                depends=(f"nvidia-kernel-common-{BRANCH} {exactly}", f"libnvidia-compute-{BRANCH} {exactly}",
                         f"nvidia-compute-utils-{BRANCH} {exactly}", f"nvidia-firmware-{BRANCH}-{release} {exactly}")),
    ]

"""The stand-in kernel packages of Debian's archive: names, Depends and maintainer scripts as Debian's
linux packages have them (README.md), payloads a few bytes.

linux-image-<release> installs /boot/vmlinuz-<release> (what the lab's stand-in boot loader picks from,
tests/lab/laptop.py) and runs /etc/kernel/postinst.d at configure; linux-headers-<release> installs
/usr/src/linux-headers-<release> with the /lib/modules/<release>/build link dkms builds against and runs
/etc/kernel/header_postinst.d, where dkms's hook rebuilds every DKMS module for the new kernel.
"""

from __future__ import annotations

from tests.standins.nvidia.debs import DebSpec, PackageFile, PackageLink

from .catalogue import FLAVOUR, Kernel

NOTE = "\n Stand-in of the provision test lab (tests/standins/debian): not Debian's package."
# Debian's linux source, debian/templates/image.postinst.in (linux-update-symlinks left out: no
# bootloader here) and headers.postinst.in: the hooks dkms installs itself into
IMAGE_POSTINST = """#!/bin/sh -e
version={release}
image_path=/boot/vmlinuz-$version
if [ "$1" != configure ]; then
    exit 0
fi
depmod $version
if [ -d /etc/kernel/postinst.d ]; then
  DEB_MAINT_PARAMS="$*" run-parts --report --exit-on-error --arg=$version \\
        --arg=$image_path /etc/kernel/postinst.d
fi
exit 0
"""
HEADERS_POSTINST = """#!/bin/sh -e
version={release}
if [ -d /etc/kernel/header_postinst.d ]; then
  DEB_MAINT_PARAMS="$*" run-parts --report --exit-on-error --arg=$version \\
        /etc/kernel/header_postinst.d
fi
exit 0
"""
# Debian 13's (linux 6.12, debian/templates/image.postinst.in and headers.postinst.in, as its
# linux-image-6.12.118+deb13-amd64 and linux-headers-6.12.118+deb13-amd64 carry them; linux-update-symlinks
# left out as above): the hooks run through linux-run-hooks of linux-base (>= 4.12~), the real one
IMAGE_POSTINST_13 = """#!/bin/sh -e
version={release}
image_path=/boot/vmlinuz-$version
if [ "$1" != configure ]; then
    exit 0
fi
depmod $version
linux-run-hooks image postinst $version $image_path -- "$@"
exit 0
"""
HEADERS_POSTINST_13 = """#!/bin/sh -e
version={release}
linux-run-hooks headers postinst $version -- "$@"
exit 0
"""
LINUX_BASE = "linux-base (>= 4.12~)"
# the interface the stand-in NVIDIA module's build looks for (tests/standins/nvidia/payload/dkms-build.sh)
MM_H = b"/* stand-in of include/linux/mm.h */\nint follow_pfn(void *vma, unsigned long address, unsigned long *pfn);\n"
MM_H_WITHOUT = b"/* stand-in of include/linux/mm.h, of a kernel that removed an interface the module used */\n"


def kernel_packages(kernel: Kernel) -> list[DebSpec]:
    """linux-image and linux-headers of one ABI."""
    release, version = kernel.release, kernel.version
    headers = f"/usr/src/linux-headers-{release}"
    upstream = kernel.upstream.split(".")
    makefile = f"VERSION = {upstream[0]}\nPATCHLEVEL = {upstream[1]}\nSUBLEVEL = {upstream[2]}\n# stand-in\n"
    trixie = kernel.debian >= 13
    image_postinst, headers_postinst = (IMAGE_POSTINST_13, HEADERS_POSTINST_13) if trixie else \
        (IMAGE_POSTINST, HEADERS_POSTINST)
    return [
        DebSpec(f"linux-image-{release}", version, f"Linux {kernel.upstream} for 64-bit PCs (signed){NOTE}",
                section="kernel", depends=("kmod",), extra_fields={"Pre-Depends": LINUX_BASE} if trixie else {},
                files=(PackageFile(f"/boot/vmlinuz-{release}", f"stand-in kernel {release}\n".encode()),
                       PackageFile(f"/boot/config-{release}", b"CONFIG_MODULES=y\n"),
                       PackageFile(f"/lib/modules/{release}/modules.order", b"")),
                scripts={"postinst": image_postinst.format(release=release)}),
        DebSpec(f"linux-headers-{release}", version, f"Header files for Linux {release}{NOTE}", section="kernel",
                depends=(LINUX_BASE,) if trixie else (),
                files=(PackageFile(f"{headers}/Makefile", makefile.encode()),
                       PackageFile(f"{headers}/.config", b"CONFIG_MODULES=y\n"),
                       PackageFile(f"{headers}/include/linux/mm.h", MM_H if kernel.dkms_builds else MM_H_WITHOUT)),
                links=(PackageLink(f"/lib/modules/{release}/build", headers),),
                scripts={"postinst": headers_postinst.format(release=release)}),
    ]


def flavour_metas(newest: Kernel) -> list[DebSpec]:
    """linux-image-amd64 and linux-headers-amd64: each depends on the newest ABI's package."""
    return [
        DebSpec(f"linux-image-{FLAVOUR}", newest.version, f"Linux for 64-bit PCs (meta-package){NOTE}",
                section="kernel", depends=(f"linux-image-{newest.release} (= {newest.version})",)),
        DebSpec(f"linux-headers-{FLAVOUR}", newest.version,
                f"Header files for Linux amd64 configuration (meta-package){NOTE}",
                section="kernel", depends=(f"linux-headers-{newest.release} (= {newest.version})",)),
    ]

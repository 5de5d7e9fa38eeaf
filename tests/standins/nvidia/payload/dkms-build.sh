#!/bin/sh
# STAND-IN build of the NVIDIA open kernel module (provision test lab; not NVIDIA's source). The real
# DKMS build runs NVIDIA's Kbuild against the kernel's headers; the lab shares this machine's kernel and
# its stand-in kernels (tests/standins/debian) have headers of a few files, so this script stands in
# for it: it "compiles" against the headers dkms passes (MAKE[0] in dkms.conf), and fails where the
# headers lack an interface the module uses, as 580.119.02 built on 6.17.4 and failed on 6.17.9
# (pop-os/pop#3811) and 580.142 failed on 7.1 (void-linux/void-packages#61087). Writes nvidia.ko
# holding "VERSION open" (what the stand-in loader reads); unsigned, as DKMS builds without a MOK.
# usage: dkms-build.sh VERSION KERNELRELEASE KERNEL_SOURCE_DIR
set -eu
version=$1 kernel=$2 headers=$3
echo "make[1]: Entering directory '$headers'"
echo "  CC [M]  nvidia/nv.o"
if ! grep -q 'int follow_pfn(' "$headers/include/linux/mm.h" 2>/dev/null; then
    echo "nvidia/os-mlock.c: In function 'nv_follow_pfn':" >&2
    echo "nvidia/os-mlock.c:35:12: error: implicit declaration of function 'follow_pfn' [-Werror=implicit-function-declaration]" >&2
    echo "make[1]: *** [$headers/Makefile:1234: nvidia/os-mlock.o] Error 1" >&2
    exit 2
fi
echo "  LD [M]  nvidia.ko"
printf '%s open\n' "$version" > nvidia.ko
echo "built nvidia.ko $version for $kernel"

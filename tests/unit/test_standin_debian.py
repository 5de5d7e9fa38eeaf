"""The stand-in Debian kernels and the NVIDIA DKMS stand-in behave as the real ones do where the Debian
month walk relies on it: the module's build (run as dkms runs MAKE[0], in a copy of the source) works
against the headers of the kernels that have what it uses and fails, saying what, on the one that lacks
it; the loader loads what DKMS built for the booted kernel and finds nothing for a kernel without a
build. Unpacked into a directory that stands for the root (no host, no apt, no dkms)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import cast

import pytest

from tests.standins.debian import MONTHS, RELEASES
from tests.standins.debian.archive import month_packages
from tests.standins.nvidia import HostTraits
from tests.standins.nvidia.debs import build_deb
from tests.standins.nvidia.packages_cuda import DKMS_BOOTED, dkms_module_package
from tests.standins.nvidia.repo import RepoInfo
from tests.standins.nvidia.sandbox import StandinRoot

DRIVER = "580.105.08"
SMI = ("/usr/bin/nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader")


def unpack(root: StandinRoot, specs, tmp: Path) -> None:
    debs = tmp / "debs"
    debs.mkdir(exist_ok=True)
    for spec in specs:
        subprocess.run(["dpkg-deb", "-x", str(build_deb(spec, debs)), str(root.root)], check=True)


def dkms_build(root: StandinRoot, kernel: str, tmp: Path) -> subprocess.CompletedProcess[str]:
    """What `dkms build` does with MAKE[0]: copy the source to a build tree and run it there."""
    build = tmp / f"build-{kernel}"
    shutil.copytree(root.root / f"usr/src/nvidia-{DRIVER}", build)
    conf = (build / "dkms.conf").read_text()
    assert f'MAKE[0]="sh ./dkms-build.sh {DRIVER} ${{kernelver}} ${{kernel_source_dir}}"' in conf
    # dkms passes /lib/modules/KERNEL/build, the headers package's link to this directory
    headers = root.root / f"usr/src/linux-headers-{kernel}"
    return subprocess.run(["sh", "./dkms-build.sh", DRIVER, kernel, str(headers)], cwd=build,
                          capture_output=True, text=True, check=False)


@pytest.mark.parametrize("codename", ["bookworm", "trixie"])
def test_the_dkms_build_works_where_the_headers_have_what_it_uses_and_fails_saying_why(tmp_path, codename) -> None:
    root = StandinRoot(tmp_path / "root", cast(RepoInfo, None), HostTraits())
    unpack(root, [*month_packages("three", codename), dkms_module_package(DRIVER)], tmp_path)
    for kernel in RELEASES[codename].months["three"].kernels:
        assert root.exists(f"/lib/modules/{kernel.release}/build/") is False  # a link to /usr/src: not here
        built = dkms_build(root, kernel.release, tmp_path)
        if kernel.dkms_builds:
            assert built.returncode == 0, built.stderr
            assert (tmp_path / f"build-{kernel.release}/nvidia.ko").read_text() == f"{DRIVER} open\n"
        else:
            assert built.returncode != 0
            assert "implicit declaration of function 'follow_pfn'" in built.stderr


def test_the_loader_loads_what_dkms_built_for_the_booted_kernel(tmp_path) -> None:
    root = StandinRoot(tmp_path / "root", cast(RepoInfo, None), HostTraits())
    unpack(root, [dkms_module_package(DRIVER)], tmp_path)
    two, three = MONTHS["two"].newest.release, MONTHS["three"].newest.release
    root.write(f"/lib/modules/{two}/updates/dkms/nvidia.ko", f"{DRIVER} open\n")
    root.reboot()
    root.write(DKMS_BOOTED, two + "\n")
    assert root.run("/usr/lib/nvidia-standin/modload", "nvidia").returncode == 0
    assert root.read("/run/nvidia-standin/loaded-version") == f"{DRIVER}\n"
    root.reboot()
    root.write(DKMS_BOOTED, three + "\n")  # no build for this kernel
    missing = root.run("/usr/lib/nvidia-standin/modload", "nvidia")
    assert missing.returncode != 0 and "not found" in missing.stderr
    assert not root.exists("/run/nvidia-standin/loaded-version")


def test_debian_13s_kernels_run_their_hooks_through_linux_base_as_trixies_do() -> None:
    specs = {spec.name: spec for spec in month_packages("two", "trixie")}
    image, headers = specs["linux-image-6.12.117+deb13-amd64"], specs["linux-headers-6.12.117+deb13-amd64"]
    assert image.version == headers.version == "6.12.117-1"
    assert image.extra_fields["Pre-Depends"] == "linux-base (>= 4.12~)"
    assert 'linux-run-hooks image postinst $version $image_path -- "$@"' in image.scripts["postinst"]
    assert 'linux-run-hooks headers postinst $version -- "$@"' in headers.scripts["postinst"]
    assert specs["linux-headers-amd64"].depends == ("linux-headers-6.12.117+deb13-amd64 (= 6.12.117-1)",)

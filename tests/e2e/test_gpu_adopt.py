"""Issue 9 on a lab laptop: a driver someone installed before (NVIDIA's packages, by hand, from the
guide's cuda-keyring), loaded and working, plus the stray sources entry an earlier manual attempt left
(another Signed-By for the same repository: real apt then refuses every update with "Conflicting
values set for option Signed-By", NVIDIA/cuda-repo-management#4). `provision up` adopts the driver
with no driver package change, moves the stray entry aside, and a rerun changes nothing."""

from __future__ import annotations

import pytest

from tests.e2e.helpers import HELD_BY_UP, provision
from tests.e2e.test_gpu_up import BOOT_COUNTER, GPU_STACK, boots, sh
from tests.standins.nvidia import HostTraits
from tests.standins.nvidia.catalogue import DRIVER_VERSIONS
from tests.standins.nvidia.lab_check import APT

pytestmark = pytest.mark.lab

DRIVER = DRIVER_VERSIONS[0]
STRAY = "/etc/apt/sources.list.d/cuda-manual.list"
DRIVER_PACKAGES = "dpkg-query -W -f='${Package} ${Version} ${db:Status-Abbrev}\\n' 'nvidia-*' 'libnvidia-ml*' | sort"


@pytest.fixture(scope="module")
def adopted(gpu_host, gpu_inventory, nvidia_repo, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("gpu-adopt")
    host = gpu_host(HostTraits(), prefix="adopt")
    sh(host, BOOT_COUNTER)
    cuda = f"{nvidia_repo.cuda_repos_base}/debian12/x86_64"
    sh(host, f"curl -fsSLo /tmp/k.deb {cuda}/cuda-keyring_1.1-1_all.deb && dpkg -i /tmp/k.deb && {APT} update")
    # every package at the release, as a user following NVIDIA's guide with a version would (apt alone
    # would take the newest of the exact-version dependencies and refuse)
    sh(host, f"{APT} install nvidia-driver-cuda={DRIVER}-1 nvidia-kernel-open-dkms={DRIVER}-1 nvidia-smi={DRIVER}-1 "
             f"libnvidia-ml1={DRIVER}-1 nvidia-persistenced={DRIVER}-1 && modprobe nvidia && nvidia-smi -L")
    # the earlier attempt: the same repository with another key file
    sh(host, f"echo 'deb [signed-by=/etc/apt/keyrings/cuda-old.gpg] {cuda}/ /' > {STRAY}")
    rc, refused = host.exec(f"{APT} update")
    packages_before = sh(host, DRIVER_PACKAGES)
    inventory = gpu_inventory(tmp / "inventory.yaml", [host])
    first = provision("up", str(inventory), "--tags", GPU_STACK, json_path=tmp / "first.json")
    packages_after = sh(host, DRIVER_PACKAGES)
    second = provision("up", str(inventory), "--tags", GPU_STACK, json_path=tmp / "second.json")
    return {"host": host, "first": first, "second": second, "refused": (rc, refused),
            "before": packages_before, "after": packages_after, "boots": boots(host)}


def test_the_stray_entry_really_breaks_apt_before(adopted):
    rc, output = adopted["refused"]
    assert rc != 0 and "Conflicting values set for option Signed-By" in output


def test_a_working_driver_is_adopted_with_no_driver_package_change(adopted):
    first, host = adopted["first"], adopted["host"]
    assert first.returncode == 0, first.output
    tasks = {task["name"]: task for task in first.host(host.name)["tasks"]}
    assert tasks["NVIDIA driver adopted"]["summary"].startswith(f"driver {DRIVER} (open kernel module) kept")
    assert "NVIDIA open driver installed and held" not in first.changed_tasks(host.name)
    assert "reboot for the NVIDIA driver" not in first.changed_tasks(host.name) and adopted["boots"] == 0
    # the same driver packages at the same versions (the container toolkit's are new); only the hold is new
    def driver(listing: str) -> list[str]:
        return [line.split()[0] + " " + line.split()[1] for line in listing.splitlines() if "container" not in line]
    assert driver(adopted["after"]) == driver(adopted["before"])
    assert f"nvidia-kernel-open-dkms {DRIVER}-1" in driver(adopted["after"])
    assert sh(host, "apt-mark showhold").split() == HELD_BY_UP


def test_the_stray_entry_is_moved_aside_and_said(adopted):
    first, host = adopted["first"], adopted["host"]
    tasks = {task["name"]: task for task in first.host(host.name)["tasks"]}
    summary = tasks["stray NVIDIA CUDA sources of an earlier attempt disabled"]["summary"]
    assert summary.startswith("run: # move aside stray NVIDIA sources") and STRAY in summary
    assert sh(host, f"test ! -e {STRAY} && test -e {STRAY}.provision-disabled && echo moved") == "moved"


def test_the_rerun_changes_nothing(adopted):
    second, name = adopted["second"], adopted["host"].name
    assert second.returncode == 0, second.output
    assert second.changed_tasks(name) == []

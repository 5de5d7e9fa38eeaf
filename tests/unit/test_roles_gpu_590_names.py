"""Branch 590 and later in NVIDIA's repository: the Ubuntu packages lose the branch from their names
and NVIDIA's pinning package holds the branch (NVIDIA Driver Installation Guide, "Recent Updates:
Ubuntu 590 and later packages"; recorded in tests/unit/fixtures/recorded/nvidia_ubuntu_590_renames.txt).
A pin of 590+ must ask apt for names that exist; 580 keeps its names."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.test_roles_gpu_support import facts, render_tasks

UBUNTU = "rtx5090-laptop-ubuntu2404.txt"
DEBIAN = "debian12-rtx5090-standin-fresh.txt"
INSTALL = "NVIDIA open driver installed and held"
RENAMES = Path(__file__).parent / "fixtures/recorded/nvidia_ubuntu_590_renames.txt"


def installed(fixture: str, **host_vars: object) -> dict[str, str | None]:
    # the compute-only flavour's names (the laptop's prime-select would choose the full driver)
    rendered = render_tasks(facts(fixture), nvidia_driver_source="nvidia", nvidia_driver_flavour="headless",
                            **host_vars)[INSTALL]
    return {spec.split("=")[0]: (spec.split("=", 1)[1] if "=" in spec else None) for spec in _specs(rendered.args)}


def _specs(args: object) -> list[str]:
    return [f"{name}={version}" if version else name for name, version in args.specs]


def test_ubuntu_580_keeps_the_branch_in_the_names() -> None:
    assert installed(UBUNTU) == {"nvidia-headless-580-open": "580.*", "nvidia-utils-580": "580.*"}


def test_ubuntu_590_and_later_names_carry_no_branch_and_the_pinning_package_holds_it() -> None:
    assert installed(UBUNTU, nvidia_driver_branch="595") == {
        "nvidia-headless-open": "595.*", "nvidia-utils": "595.*", "nvidia-driver-pinning-595": None}
    exact = installed(UBUNTU, nvidia_driver_branch="595", nvidia_driver_version="595.71.05")
    assert exact["nvidia-driver-pinning-595.71.05"] is None and exact["nvidia-utils"] == "595.71.05-*"


def test_debian_names_never_held_the_branch() -> None:
    assert installed(DEBIAN, nvidia_driver_branch="590") == {
        "nvidia-driver-cuda": "590.*", "nvidia-kernel-open-dkms": "590.*", "nvidia-driver-pinning-590": None}


@pytest.mark.parametrize("line", [line for line in RENAMES.read_text().splitlines() if not line.startswith("#")])
def test_the_role_renames_as_nvidia_s_table_does(line: str) -> None:
    original, new = line.split()
    templated = original.replace("-580", "-%(branch)s")
    names = installed(UBUNTU, nvidia_driver_branch="590", nvidia_driver_packages={"ubuntu": [templated], "debian": []})
    assert new in names and original.replace("580", "590") not in names

"""Fixtures for the GPU e2e tests: the stand-in NVIDIA repositories served to the lab, lab hosts with
simulated GPU traits, and the inventory a user with an offline mirror would write for them.

The tool reaches the stand-ins only through its repository base-URL settings; the rest of the lab
inventory turns off what the lab cannot have (kernel headers and DKMS for this machine's kernel,
which Debian's archive does not carry) and names the lab registry's check image.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.lab import Lab, LabHost
from tests.lab.laptop import check_image, gpu_laptop
from tests.lab.net import MACHINE_FROM_HOSTS, free_port
from tests.standins.nvidia import HostTraits, RepoInfo, build_repo, serve

FIRST_REPO_PORT = 18765


@pytest.fixture(scope="session")
def nvidia_repo(lab: Lab) -> Iterator[RepoInfo]:
    """The stand-in CUDA and container toolkit repositories, served on 127.0.0.1 (10.0.2.2 for hosts)."""
    port = free_port(FIRST_REPO_PORT, set())
    info = build_repo(lab.dir / "standin-nvidia-repo", f"http://{MACHINE_FROM_HOSTS}:{port}")
    server = serve(info.out_dir, port)
    try:
        yield info
    finally:
        server.stop()


@pytest.fixture(scope="session")
def gpu_check_image(lab: Lab, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A busybox image with every applet (the stand-in nvidia-smi is a shell script that needs sed,
    tr, cut, ...), pushed to the lab registry; returns the reference hosts pull it by."""
    return check_image(lab, tmp_path_factory.mktemp("gpu-check-image"))


@pytest.fixture(scope="session")
def gpu_host(lab: Lab, tmp_path_factory: pytest.TempPathFactory) -> Callable[..., LabHost]:
    """`gpu_host(traits, prefix=..., suite=..., offline=False, extra_ports=())`: a fresh lab host (Debian
    `suite`) with the simulated hardware of `traits` (an RTX 5090 Laptop by default); `offline`: no egress
    but SSH; `extra_ports`: guest ports forwarded from this machine too (an office's vLLM and exporters).
    Traits that act at boot (nouveau) are applied as a boot would."""
    def make(traits: HostTraits | None = None, prefix: str = "gpu", suite: str = "bookworm",
             offline: bool = False, extra_ports: Sequence[int] = ()) -> LabHost:
        traits = traits or HostTraits()
        host = gpu_laptop(lab, tmp_path_factory.mktemp(f"{prefix}-traits"), traits, prefix, suite, offline,
                          extra_ports)
        if traits.nouveau_at_boot:  # written after this boot: do what the next boot would
            rc, out = host.exec("systemctl daemon-reload && systemctl start standin-nouveau.service && "
                                "test -d /sys/module/nouveau")
            assert rc == 0, f"nouveau not simulated: {out}"
        return host
    return make


@pytest.fixture(scope="session")
def gpu_inventory(lab: Lab, nvidia_repo: RepoInfo, gpu_check_image: str) -> Callable[..., Path]:
    """`gpu_inventory(path, hosts, host_vars=None, **overrides)`: the fleet inventory a user with
    offline mirrors writes (only the repository bases differ from NVIDIA's), plus the lab's limits:
    this machine's kernel has no headers in Debian's archive and the stand-in module needs none, and
    the lab's image and weights take megabytes, not the 60 GiB the default disk check asks for (the
    lab hosts share the controller's disk: a CI machine with 58 GiB free failed every GPU test)."""
    def write(path: Path, hosts: list[LabHost], host_vars: dict[str, dict[str, Any]] | None = None,
              **overrides: Any) -> Path:
        all_vars = {
            "nvidia_cuda_repo_base": nvidia_repo.cuda_repos_base,
            "nvidia_container_repo_base": nvidia_repo.container_toolkit_base,
            "nvidia_kernel_headers": {"debian": [], "ubuntu": []},
            "nvidia_dkms_packages": [],
            "docker_insecure_registries": [lab.registry.address_for_hosts],
            "container_toolkit_check_image": gpu_check_image,
            "container_toolkit_check_cuda": False,  # busybox: NVML only (test_cdi_serving checks CUDA)
            "preflight_min_free_gib": 2,
            **overrides,
        }
        lab.write_inventory(path, hosts, **all_vars)
        if host_vars:
            document = yaml.safe_load(path.read_text())
            for name, variables in host_vars.items():
                document["all"]["hosts"][name].update(variables)
            path.write_text(yaml.safe_dump(document, sort_keys=False))
        return path
    return write

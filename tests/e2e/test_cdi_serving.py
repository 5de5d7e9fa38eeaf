"""CDI for real (issue 21, item 4): a Debian 13 laptop (docker.io 26, which reads CDI specs) gets the
whole GPU stack and the model's unit from one `provision up`; the model's container holds the GPU by
CDI (docker's own record of it: `DeviceRequests` with the `cdi` driver), the unit is active, and the
GPU check ran the serving image with the same request and started CUDA in it. The same check with
the image whose CUDA compatibility libcuda is on its library path (the vLLM images from 0.15:
gpustack/gpustack#4678, vllm-project/vllm#33116; tests/standins/vllm/cuda.py) fails on CUDA's
Error 803 while nvidia-smi in it works, and says so.

The CUDA toolkit is off on this host: Debian 13's glibc 2.41 breaks CUDA 12.9's headers
(NVIDIA/cuda-samples#378), which preflight refuses (test_roles_gpu_cuda_compile.py).
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.helpers import provision
from tests.lab import Lab
from tests.lab.net import MACHINE_FROM_HOSTS
from tests.standins.hub.cli import start_hub
from tests.standins.hub.server import HubOptions
from tests.standins.nvidia import HostTraits
from tests.standins.vllm.build import build_images

pytestmark = pytest.mark.lab

HF_TOKEN = "hf_standin_" + secrets.token_hex(12)
CHECK = "a container sees the GPU"
STANDIN_ENV = {"STANDIN_READY_DELAY": "1", "STANDIN_TOKENS_PER_S": "2000"}
ERROR_803 = "Error 803: system has unsupported display driver / cuda driver combination"


def sh(host, command: str) -> str:
    rc, output = host.exec(command)
    assert rc == 0, f"{command}: {output}"
    return output.strip()


def task(run, host: str, name: str) -> dict[str, Any]:
    return next(t for t in run.host(host)["tasks"] if t["name"] == name)


@pytest.fixture(scope="module")
def laptop(lab: Lab, gpu_host, gpu_inventory, tmp_path_factory) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("cdi-serving")
    started = time.monotonic()
    images = build_images(f"127.0.0.1:{lab.registry.port}", pull_registry=lab.registry.address_for_hosts,
                          behaviours=("ok", "cuda-compat"), env=STANDIN_ENV, log=lambda _: None)
    hub = start_hub(tmp / "hub", shard_size=1024 * 1024, shards=1, options=HubOptions(token=HF_TOKEN))
    host = gpu_host(HostTraits(nouveau_at_boot=False), prefix="cdi", suite="trixie")
    inventory = gpu_inventory(
        tmp / "inventory.yaml", [host],
        nvidia_debian13_sha1_ok=True,  # the stand-in CUDA key is the lab's own (no SHA-1 binding)
        cuda_toolkit_enabled=False,
        container_toolkit_check_image=images["ok"], container_toolkit_check_cuda=True,  # the role's default
        vllm_image=images["ok"], hf_endpoint=f"http://{MACHINE_FROM_HOSTS}:{hub.server.server_address[1]}",
        hf_token=HF_TOKEN, office_cache_trusted=True, vllm_ready_timeout=120, smoke_timeout=60,
        preflight_min_free_gib=5)
    ready = time.monotonic()
    up = provision("up", str(inventory), json_path=tmp / "up.json")
    served = time.monotonic()
    compat = provision("up", str(inventory), "--tags", "container_toolkit",
                       "-e", f"container_toolkit_check_image={images['cuda-compat']}", json_path=tmp / "compat.json")
    print(f"\nlab ready {ready - started:.0f} s, up {served - ready:.0f} s, "
          f"compat check {time.monotonic() - served:.0f} s")
    try:
        yield {"host": host, "up": up, "compat": compat, "images": images}
    finally:
        hub.stop()


def test_the_model_serves_on_the_cdi_path(laptop):
    host, up = laptop["host"], laptop["up"]
    assert up.returncode == 0, up.output[-6000:]
    assert sh(host, "docker version --format '{{.Server.Version}}'").startswith("26.")
    assert sh(host, "systemctl is-active vllm") == "active"
    requests = json.loads(sh(host, "docker inspect -f '{{json .HostConfig.DeviceRequests}}' vllm"))
    assert requests == [{"Driver": "cdi", "Count": 0, "DeviceIDs": ["nvidia.com/gpu=all"],
                         "Capabilities": None, "Options": None}], requests
    assert "--gpus" not in sh(host, "systemctl cat vllm")


def test_docker_26_says_no_such_container_before_a_first_start(laptop):
    # the unit's `ExecStartPre=-docker rm -f vllm` prints this before every first start: fatal.py must
    # not read it as docker's failure (tests/unit/test_fatal_docker_lines.py)
    rc, output = laptop["host"].exec("docker rm -f provision-never-started")
    assert "Error response from daemon: No such container: provision-never-started" in output, (rc, output)


def test_the_glibc_preflight_expects_is_the_hosts(laptop):
    # preflight_glibc says Debian 13 ships 2.41 (CUDA 12 is refused on it): the host says the same
    assert sh(laptop["host"], "getconf GNU_LIBC_VERSION") == "glibc 2.41"


def test_the_gpu_check_started_cuda_in_the_serving_image(laptop):
    host, up = laptop["host"], laptop["up"]
    check = task(up, host.name, CHECK)
    handler = task(up, host.name, "a container sees the GPU after the restart")
    summary = check["summary"] if check["status"] != "skipped" else handler["summary"]
    assert "CUDA initialised in the container: NVIDIA GeForce RTX 5090 Laptop GPU" in summary, summary


def test_the_compat_libraries_on_the_path_fail_the_check_on_error_803(laptop):
    host, compat = laptop["host"], laptop["compat"]
    assert compat.returncode != 0
    check = task(compat, host.name, CHECK)
    assert check["status"] == "failed", check
    said = compat.output  # what the user reads
    assert ERROR_803 in said, (check, said[-3000:])
    assert "GPU 0: NVIDIA GeForce RTX 5090 Laptop GPU" in said  # NVML works in the same container
    assert sh(host, "systemctl is-active vllm") == "active"  # the model's unit was not touched

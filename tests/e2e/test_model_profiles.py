"""`provision up` with `model: <another profile>`: the Qwen2.5-VL profile deployed on a lab laptop
(weights from a stand-in hub serving that repository, the stand-in vLLM image), smoke checks passed,
the unit running exactly that profile's arguments; `provision vars` says where `model` was set."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from tests.e2e.helpers import provision
from tests.e2e.test_serving import HF_TOKEN, MIB, RELEASE_TASK, UNIT, Laptop, hub_endpoint, sh, vllm_images
from tests.standins.hub.cli import RunningHub, start_hub
from tests.standins.hub.server import HubOptions
from tests.standins.nvidia import HostTraits

pytestmark = pytest.mark.lab
__all__ = ["vllm_images"]

PROFILE = "qwen2.5-vl-7b-awq"
QWEN = "Qwen/Qwen2.5-VL-7B-Instruct-AWQ"


@pytest.fixture(scope="module")
def qwen_hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningHub]:
    tmp = tmp_path_factory.mktemp("qwen-hub")
    running = start_hub(tmp / "repo", repo_id=QWEN, shard_size=2 * MIB, shards=2, options=HubOptions(token=HF_TOKEN))
    yield running
    running.stop()


@pytest.fixture(scope="module")
def deployed(gpu_host, gpu_inventory, vllm_images, qwen_hub, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("profiles")
    host = gpu_host(HostTraits(), prefix="qwen")
    laptop = Laptop(host, tmp, gpu_inventory, {
        "model": PROFILE, "hf_endpoint": hub_endpoint(qwen_hub), "hf_token": HF_TOKEN, "office_cache_trusted": True,
        "vllm_image": vllm_images["ok"], "vllm_ready_timeout": 180, "smoke_timeout": 60})
    return laptop, laptop.up("first")


def test_another_profile_deploys_and_passes_its_smoke_checks(deployed):
    laptop, first = deployed
    assert first.returncode == 0, first.output
    release = next(t for t in first.host(laptop.host.name)["tasks"] if t["name"] == RELEASE_TASK)
    assert "text " in release["summary"] and "vision " in release["summary"], release["summary"]
    unit = sh(laptop.host, f"cat {UNIT}")
    assert QWEN in unit and "--served-model-name qwen2.5-vl-7b-instruct" in unit and "--max-model-len 32768" in unit
    assert "TRITON_ATTN" not in unit  # the Gemma 4 profile's backend is not inherited


def test_vars_names_the_profile_and_where_model_was_set(deployed):
    laptop, _ = deployed
    done = provision("vars", str(laptop.inventory), "--json")
    assert done.returncode == 0, done.output
    rows = json.loads(done.stdout)[laptop.host.name]
    assert rows["model"]["value"] == PROFILE and rows["model"]["from"].startswith(str(laptop.inventory))
    assert rows["hf_model"]["from"].endswith(f"roles/vllm/models/{PROFILE}.yaml:10")
    assert rows["hf_token"]["value"] == "***"

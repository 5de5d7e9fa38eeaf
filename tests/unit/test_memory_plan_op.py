"""memory_plan on recorded facts: the RTX 5090 Laptop (before and after its driver) and the H200."""

from pathlib import Path

import pytest
import yaml

from provision.errors import TaskFailed
from provision.facts.probe import parse_probe
from provision.ops import REGISTRY

REPO = Path(__file__).resolve().parents[2]
FIXTURES = Path(__file__).parent / "fixtures/facts"
VLLM = yaml.safe_load((REPO / "roles/vllm/models/gemma-4-26b-a4b-awq.yaml").read_text())  # the default model
PLAN = yaml.safe_load((REPO / "roles/plan/defaults.yaml").read_text())


def plan(fixture: str, **overrides):
    op = REGISTRY["memory_plan"]
    args = op.Args.model_validate({
        "model_architecture": VLLM["model_architecture"], "max_model_len": VLLM["max_model_len"],
        "gpu_memory_utilization": VLLM["gpu_memory_utilization"], "kv_cache_dtype": "fp8",
        "max_num_batched_tokens": VLLM["max_num_batched_tokens"], "gpu_profiles": PLAN["gpu_profiles"],
        "min_full_sequences": PLAN["min_full_sequences"], "overhead_gib": PLAN["kv_overhead_gib"],
        **overrides,
    })
    return op.plan(args, parse_probe((FIXTURES / fixture).read_text()), None)


def test_seed_fits_on_the_laptop_and_is_never_a_change():
    result = plan("rtx5090-laptop-ubuntu2404.txt")
    assert not result.changed and result.result["max_model_len"] == 131072
    assert 1.0 <= result.result["full_sequences"] < 2.0
    assert "RTX 5090 Laptop" in result.summary


def test_before_the_driver_the_profile_gives_the_memory():
    result = plan("rtx5090-fresh-secureboot.txt")
    assert "(profile)" in result.result["gpu"] and result.result["gpu_memory_mib"] == 24463


def test_too_long_a_context_is_refused_naming_what_fits():
    with pytest.raises(TaskFailed, match=r"max_model_len 262144 does not fit.*largest context that fits is \d+"):
        plan("rtx5090-laptop-ubuntu2404.txt", max_model_len=262144)


def test_auto_on_the_h200_takes_the_model_maximum():
    assert plan("h200-driver580.txt", max_model_len="auto").result["max_model_len"] == 262144


def test_no_gpu_is_refused():
    with pytest.raises(TaskFailed, match="no NVIDIA GPU"):
        plan("debian12-nogpu.txt")

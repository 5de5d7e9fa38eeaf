"""The planner against the seed's arithmetic (REFERENCE.md §2)."""

import pytest

from provision.vllm.planner import (
    GIB,
    AttentionLayers,
    ModelShape,
    ServingSettings,
    kv_bytes_per_sequence,
    plan_memory,
)

GEMMA4_26B = ModelShape(
    full=AttentionLayers(count=5, kv_heads=2, head_dim=512),
    sliding=AttentionLayers(count=25, kv_heads=8, head_dim=256, window=1024),
    weights_gib=17.12,
    max_context=262144,
)
SEED = ServingSettings(max_model_len=131072, gpu_memory_utilization=0.92, kv_cache_dtype="fp8",
                       max_num_batched_tokens=8192)
RTX_5090_LAPTOP_MIB = 24463
RTX_5090_MIB = 32607


def test_kv_per_sequence_matches_the_reference():
    full_only = ModelShape(GEMMA4_26B.full, None, 0, 262144)
    assert kv_bytes_per_sequence(full_only, 131072, SEED) == pytest.approx(1.25 * GIB)
    total = kv_bytes_per_sequence(GEMMA4_26B, 131072, SEED) / GIB
    assert total == pytest.approx(2.13, abs=0.01)  # "about 2.1 GiB a sequence"


def test_seed_fits_128k_on_24gb_with_about_one_full_sequence():
    plan = plan_memory(RTX_5090_LAPTOP_MIB, GEMMA4_26B, SEED)
    assert plan.fits
    assert 2.0 <= plan.kv_available_gib <= 4.0  # "roughly 2-4 GiB"
    assert 1.0 <= plan.full_sequences < 2.0  # "one or two full-length sequences"


def test_32gb_card_fits_256k():
    settings = ServingSettings(max_model_len=262144, gpu_memory_utilization=0.92, kv_cache_dtype="fp8",
                               max_num_batched_tokens=8192)
    plan = plan_memory(RTX_5090_MIB, GEMMA4_26B, settings)
    assert plan.fits and plan.full_sequences >= 1


def test_256k_does_not_fit_on_24gb_and_says_what_would():
    settings = ServingSettings(max_model_len=262144, gpu_memory_utilization=0.92, kv_cache_dtype="fp8",
                               max_num_batched_tokens=8192)
    plan = plan_memory(RTX_5090_LAPTOP_MIB, GEMMA4_26B, settings)
    assert not plan.fits
    assert 131072 <= plan.largest_fitting_context < 262144
    message = plan.refusal(262144)
    assert "262144 does not fit" in message and str(plan.largest_fitting_context) in message


def test_bf16_kv_cache_halves_what_fits():
    bf16 = ServingSettings(max_model_len=131072, gpu_memory_utilization=0.92, kv_cache_dtype="auto",
                           max_num_batched_tokens=8192)
    assert not plan_memory(RTX_5090_LAPTOP_MIB, GEMMA4_26B, bf16).fits


def test_auto_picks_the_largest_context_for_the_wanted_concurrency():
    auto = ServingSettings(max_model_len=None, gpu_memory_utilization=0.92, kv_cache_dtype="fp8",
                           max_num_batched_tokens=8192, min_full_sequences=2)
    plan = plan_memory(RTX_5090_LAPTOP_MIB, GEMMA4_26B, auto)
    assert plan.fits and plan.max_model_len % 16 == 0
    assert plan.full_sequences >= 2
    one_more_block = kv_bytes_per_sequence(GEMMA4_26B, plan.max_model_len + 16, auto) * 2
    assert one_more_block > plan.kv_available_gib * GIB

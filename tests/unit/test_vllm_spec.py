"""The one place the `vllm serve` flags are assembled: named flags, then the profile's, then extras."""

from __future__ import annotations

from provision.vllm.spec import serve_flags

VARIABLES = {
    "vllm_named_flags": {"served-model-name": "served_model_name", "max-model-len": "max_model_len"},
    "served_model_name": "workhorse", "max_model_len": "auto",
    "vllm_flags": {"kv-cache-dtype": "fp8", "port": 8000},
    "vllm_extra_flags": {"port": 8001, "enforce-eager": True, "kv-cache-dtype": None},
}


def test_order_and_overrides_in_place():
    flags = serve_flags(VARIABLES, {"max_model_len": 228544})
    assert list(flags) == ["served-model-name", "max-model-len", "kv-cache-dtype", "port", "enforce-eager"]
    assert flags["max-model-len"] == 228544 and flags["port"] == 8001 and flags["kv-cache-dtype"] is None


def test_auto_stays_auto_without_a_plan():
    assert serve_flags(VARIABLES)["max-model-len"] == "auto"
    assert serve_flags({**VARIABLES, "max_model_len": 4096}, {"max_model_len": 228544})["max-model-len"] == 4096

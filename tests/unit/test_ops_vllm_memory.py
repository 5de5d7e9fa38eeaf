"""vllm_memory on recorded probe output: planned vs found, recorded once, never a change."""

import base64
import json
from pathlib import Path

import pytest

from provision.ops import REGISTRY
from provision.vllm.release import Record
from tests.unit.vllm_service_support import role_service

LOG = ("Model loading took 17.12 GiB memory and 41.2 seconds\nAvailable KV cache memory: 3.06 GiB\n"
       "GPU KV cache size: 188,397 tokens, Maximum concurrency for 131,072 tokens per request: 1.44x\n")
PLANNED = {"kv_available_gib": 3.06, "full_sequences": 1.44, "max_model_len": 131072}


def probe_output(current: dict | None, log: str = LOG) -> str:
    record = Record(current=current).text()
    return (f"log={base64.b64encode(log.encode()).decode()}\n"
            f"record={base64.b64encode(record.encode()).decode()}\n")


def plan(current: dict | None):
    op = REGISTRY["vllm_memory"]
    args = op.Args.model_validate({"service": role_service(), "planned": PLANNED})
    return op.plan(args, None, op.probe(args).parse(probe_output(current)))


def test_first_time_the_figures_are_written_into_the_record_without_a_change():
    result = plan({"id": "abc"})
    assert not result.changed and result.commands
    assert "KV cache planned 3.06 GiB, vLLM found 3.06 GiB" in result.summary
    written = json.loads(result.commands[0].data)
    assert written["current"]["startup_memory"]["kv_available_gib"] == 3.06
    assert written["current"]["id"] == "abc"
    assert result.result["found_max_concurrency"] == 1.44


def test_converged_when_the_record_already_holds_them():
    result = plan({"id": "abc", "startup_memory": {"weights_gib": 17.12, "kv_available_gib": 3.06,
                                                   "kv_cache_tokens": 188397, "max_concurrency": 1.44,
                                                   "concurrency_tokens": 131072}})
    assert not result.changed and not result.commands


def test_nothing_running_nothing_to_do():
    op = REGISTRY["vllm_memory"]
    args = op.Args.model_validate({"service": role_service(), "planned": {}})
    result = op.plan(args, None, op.probe(args).parse(""))
    assert not result.commands and "no memory figures" in result.summary


def test_found_far_below_planned_is_a_warning_with_both_numbers():
    op = REGISTRY["vllm_memory"]
    planned = {"kv_available_gib": 4.0, "full_sequences": 1.9, "max_model_len": 131072}
    args = op.Args.model_validate({"service": role_service(), "planned": planned})
    result = op.plan(args, None, op.probe(args).parse(probe_output({"id": "abc"})))
    assert "WARNING: vLLM found 3.06 GiB of KV cache memory, 24% below the planned 4.00 GiB" in result.summary
    assert "vLLM found 1.44 of full-length sequences, 24% below the planned 1.90" in result.summary
    assert len(result.result["warnings"]) == 2


def test_within_fifteen_percent_is_no_warning():
    assert "WARNING" not in plan({"id": "abc"}).summary


REAL_LOGS = Path(__file__).parent / "fixtures" / "vllm_logs"  # sources: SOURCES.md there


@pytest.mark.parametrize(("name", "found"), [
    # V0's table of figures (vllm#10511): no other line says the KV memory
    ("startup__vllm-10511-profiling-table.log",
     "vLLM found 53.29 GiB; weights 14.96 GiB; activation peak 1.26 GiB; non-torch 1.79 GiB"),
    # V0 workers' one line (vllm#15783): the weights, the activations and the KV memory together
    ("startup__vllm-15783-v0-profiling.log",
     "vLLM found 46.11 GiB; full-length sequences planned 1.44, vLLM 84.32; weights 15.53 GiB; "
     "activation peak 1.72 GiB; non-torch 0.09 GiB"),
    # --kv-cache-memory-bytes (vllm#49878): the reservation stands for the profile vLLM skipped
    ("unknown__vllm-49878-gemma4-kv-bytes.log",
     "KV cache planned 3.06 GiB, vLLM reserved 49.00 GiB (--kv-cache-memory-bytes)"),
])
def test_planned_vs_found_is_filled_from_vllms_other_memory_wordings(name: str, found: str) -> None:
    op = REGISTRY["vllm_memory"]
    args = op.Args.model_validate({"service": role_service(), "planned": PLANNED})
    result = op.plan(args, None, op.probe(args).parse(probe_output({"id": "abc"}, (REAL_LOGS / name).read_text())))
    assert found in result.summary
    assert json.loads(result.commands[0].data)["current"]["startup_memory"]


def test_a_pinned_kv_size_below_the_plan_is_no_plan_error() -> None:
    """With --kv-cache-memory-bytes vLLM follows the pin, not the plan (vllm#49878's line): no warning."""
    op = REGISTRY["vllm_memory"]
    args = op.Args.model_validate({"service": role_service(), "planned": {**PLANNED, "kv_available_gib": 80.0}})
    log = (REAL_LOGS / "unknown__vllm-49878-gemma4-kv-bytes.log").read_text()
    result = op.plan(args, None, op.probe(args).parse(probe_output({"id": "abc"}, log)))
    assert "vLLM reserved 49.00 GiB" in result.summary and "WARNING" not in result.summary

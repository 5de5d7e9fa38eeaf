from provision.vllm.startup_log import StartupMemory, parse_startup_memory, planned_vs_actual

LOG = """INFO 11-30 14:00:00 [gpu_model_runner.py:2000] Model loading took 17.12 GiB memory and 41.2 seconds
INFO 11-30 14:00:30 [gpu_worker.py:300] Available KV cache memory: 3.06 GiB
INFO 11-30 14:00:30 [kv_cache_utils.py:900] GPU KV cache size: 188,397 tokens, """ \
    """Maximum concurrency for 131,072 tokens per request: 1.44x
"""


def test_parse():
    assert parse_startup_memory(LOG) == StartupMemory(17.12, 3.06, 188397, 1.44, concurrency_tokens=131072)
    assert parse_startup_memory("nothing") == StartupMemory()


def test_planned_vs_actual_line():
    line = planned_vs_actual({"kv_available_gib": 3.06, "full_sequences": 1.44}, parse_startup_memory(LOG))
    assert "planned 3.06 GiB, vLLM found 3.06 GiB" in line and "vLLM 1.44" in line

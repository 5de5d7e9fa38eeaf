"""The vLLM product's operations (memory_plan, vllm_release, vllm_rollback, vllm_smoke, vllm_memory),
registered with the engine by provision/ops/__init__.py (PRODUCTS)."""

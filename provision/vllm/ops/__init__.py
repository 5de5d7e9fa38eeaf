"""The vLLM product's operations (memory_plan, vllm_release, vllm_rollback, vllm_smoke, vllm_memory),
imported by name through provision/ops/__init__.py (OPERATION_MODULES)."""

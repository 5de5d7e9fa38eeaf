"""The vLLM product's operations (memory_plan, vllm_release, vllm_rollback, vllm_smoke, vllm_memory),
found by name through the product's hook, provision/vllm/product.py."""

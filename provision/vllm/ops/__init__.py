"""The vLLM product's operations (memory_plan, vllm_release, vllm_rollback, vllm_smoke, vllm_memory),
registered with the engine by provision/ops/__init__.py (PRODUCTS)."""

from provision.playbook.templating import FUNCTIONS
from provision.vllm.spec import vllm_serve_flags

FUNCTIONS["vllm_serve_flags"] = vllm_serve_flags

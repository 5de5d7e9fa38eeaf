"""The vLLM product's hook (provision/products.py): its operations and its template function."""

from provision.products import Product

PRODUCT = Product(
    operations={
        "memory_plan": "provision.vllm.ops.memory_plan",
        "vllm_memory": "provision.vllm.ops.vllm_memory",
        "vllm_release": "provision.vllm.ops.vllm_release",
        "vllm_rollback": "provision.vllm.ops.vllm_rollback",
        "vllm_smoke": "provision.vllm.ops.vllm_smoke",
    },
    template_functions={"vllm_serve_flags": "provision.vllm.spec:vllm_serve_flags"},
)

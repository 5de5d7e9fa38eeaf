"""memory_plan: refuse a context length the GPU cannot hold, before anything is changed.

Pure: facts (the GPU) + arguments (model architecture, serving settings, GPU profiles) -> the
plan of provision/vllm/planner.py. Never a change; `max_model_len: auto` resolves here, and the
result (registered) is what the vllm role renders.
"""

from __future__ import annotations

from typing import Any, Literal

from provision.errors import TaskFailed
from provision.facts.model import HostFacts
from provision.ops.base import OpArgs, Operation, Plan, register
from provision.vllm.gpus import GpuProfile, UnknownGpu, identify_gpu
from provision.vllm.planner import AttentionLayers, ModelShape, ServingSettings, plan_memory


class MemoryPlanArgs(OpArgs):
    model_architecture: dict[str, Any]
    max_model_len: int | Literal["auto"]
    gpu_memory_utilization: float
    kv_cache_dtype: str
    max_num_batched_tokens: int
    # the plan role's values (roles/plan/defaults.yaml), no default here
    min_full_sequences: int
    overhead_gib: float
    gpu_profiles: list[dict[str, Any]]


def model_shape(architecture: dict[str, Any]) -> ModelShape:
    full = architecture["full"]
    sliding = architecture.get("sliding")
    return ModelShape(
        full=AttentionLayers(int(full["layers"]), int(full["kv_heads"]), int(full["head_dim"])),
        sliding=AttentionLayers(int(sliding["layers"]), int(sliding["kv_heads"]), int(sliding["head_dim"]),
                                int(sliding["window"])) if sliding else None,
        weights_gib=float(architecture["weights_gib"]),
        max_context=int(architecture["max_position_embeddings"]),
    )


@register
class MemoryPlanOperation(Operation):
    name = "memory_plan"
    Args = MemoryPlanArgs
    reports = True
    reads_facts = frozenset({"gpus", "pci_gpus"})  # identify_gpu

    def plan(self, args: MemoryPlanArgs, facts: HostFacts, state: None) -> Plan:
        try:
            gpu = identify_gpu(facts, [GpuProfile.from_data(p) for p in args.gpu_profiles])
        except UnknownGpu as error:
            raise TaskFailed(str(error)) from error
        if gpu is None:
            raise TaskFailed("no NVIDIA GPU found: nothing to plan the model's memory on")
        settings = ServingSettings(
            max_model_len=None if args.max_model_len == "auto" else args.max_model_len,
            gpu_memory_utilization=args.gpu_memory_utilization, kv_cache_dtype=args.kv_cache_dtype,
            max_num_batched_tokens=args.max_num_batched_tokens, min_full_sequences=args.min_full_sequences,
            overhead_gib=args.overhead_gib,
        )
        memory = plan_memory(gpu.memory_mib, model_shape(args.model_architecture), settings)
        if not memory.fits:
            wanted = args.max_model_len if args.max_model_len != "auto" else memory.max_model_len
            raise TaskFailed(f"{gpu.description}: {memory.refusal(int(wanted))}")
        summary = (f"{gpu.description}: max_model_len {memory.max_model_len}, KV cache {memory.kv_available_gib:.2f} "
                   f"GiB available, {memory.kv_per_sequence_gib:.2f} GiB per full sequence, "
                   f"{memory.full_sequences:.2f} full-length sequences fit")
        return Plan.ok(summary, gpu=gpu.description, gpu_memory_mib=gpu.memory_mib,
                       max_model_len=memory.max_model_len, kv_available_gib=round(memory.kv_available_gib, 2),
                       kv_per_sequence_gib=round(memory.kv_per_sequence_gib, 2),
                       full_sequences=round(memory.full_sequences, 2),
                       largest_fitting_context=memory.largest_fitting_context)

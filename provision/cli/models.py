"""`provision models`: the model profiles, and the context each one fits on each known GPU.

Read only, no inventory: every profile of roles/vllm/models/ (whichever roles folder is in use) with
the role defaults under it, planned by the same memory planner `provision plan` and `up` use, on
every GPU profile of roles/plan/defaults.yaml, at the profile's gpu_memory_utilization and KV dtype.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rich.table import Table
from rich.text import Text

from provision.cli.inputs import EXIT_OK, Invocation
from provision.errors import InputError
from provision.settings import load_specs, profiles
from provision.settings.variables import RoleDefaults
from provision.vllm.gpus import GpuProfile
from provision.vllm.ops.memory_plan import model_shape
from provision.vllm.planner import ServingSettings, plan_memory


def fits(variables: dict[str, Any], gpu: GpuProfile) -> dict[str, Any]:
    """The planner's verdict for one profile on one GPU: the largest context and whether the
    profile's own max_model_len fits."""
    flags = {**variables["vllm_flags"], **(variables.get("vllm_extra_flags") or {})}
    settings = ServingSettings(
        max_model_len=None, gpu_memory_utilization=float(variables["gpu_memory_utilization"]),
        kv_cache_dtype=str(flags.get("kv-cache-dtype") or "auto"),
        max_num_batched_tokens=int(variables["max_num_batched_tokens"]),
        min_full_sequences=int(variables["min_full_sequences"]), overhead_gib=float(variables["kv_overhead_gib"]))
    plan = plan_memory(gpu.memory_mib, model_shape(variables["model_architecture"]), settings)
    largest = plan.largest_fitting_context
    wanted = variables["max_model_len"]
    return {"largest_context": largest, "configured_fits": wanted == "auto" or (largest >= int(wanted) > 0)}


def model_rows(roles_dir: Path) -> dict[str, dict[str, Any]]:
    specs = load_specs([roles_dir])
    if not specs.profile_options:
        raise InputError("no variable of these roles selects a profile (`profiles:` in meta/argument_specs.yaml)",
                         roles_dir)
    defaults = {name: value.value for name, value in RoleDefaults.read(roles_dir).values.items()}
    gpus = [GpuProfile.from_data(item) for item in defaults.get("gpu_profiles") or []]
    rows: dict[str, dict[str, Any]] = {}
    for option in specs.profile_options:
        for name in profiles.names(option):
            variables = {**defaults, **{k: v.value for k, v in profiles.read(option, name).items()}}
            rows[name] = {
                "default": defaults.get(option.name) == name, "description": profiles.summary(option, name),
                "checkpoint": variables.get("hf_model"), "max_model_len": variables.get("max_model_len"),
                "vision": bool(variables.get("smoke_vision")),
                "gpus": {gpu.name: fits(variables, gpu) for gpu in gpus},
            }
    return rows


def models_table(rows: dict[str, dict[str, Any]]) -> Table:
    table = Table(title="MODEL PROFILES (largest context that fits, per GPU)", title_justify="left")
    gpus = list(next(iter(rows.values()))["gpus"]) if rows else []
    for column in ("profile", "checkpoint", "vision", "max_model_len", *gpus):
        table.add_column(column.removeprefix("NVIDIA ").removeprefix("GeForce "), overflow="fold")
    for name, row in rows.items():
        cells = []
        for gpu in gpus:
            verdict = row["gpus"][gpu]
            cells.append(Text(str(verdict["largest_context"]), style="green" if verdict["configured_fits"] else "red"))
        label = Text(name + (" (default)" if row["default"] else ""), style="bold" if row["default"] else "")
        table.add_row(label, str(row["checkpoint"]), "yes" if row["vision"] else "no", str(row["max_model_len"]),
                      *cells)
    return table


def cmd_models(inv: Invocation) -> int:
    rows, console = model_rows(inv.roles), inv.console
    if inv.json:
        console.print_json(json.dumps(rows))
        return EXIT_OK
    console.print(models_table(rows))
    for name, row in rows.items():
        console.print(f"{name}: {row['description']}", highlight=False, markup=False)
    console.print("green: the profile's max_model_len fits that GPU; red: set max_model_len to at most the figure "
                  "(or auto).", highlight=False)
    return EXIT_OK

"""The `vllm serve` flags of a host, assembled in one place from the profile and the variables.

Order (kept stable: the release fingerprint is taken over the argv): the flags that have a variable
of their own (`vllm_named_flags`: flag -> variable, data in roles/vllm/defaults.yaml), then the
profile's `vllm_flags`, then the host's `vllm_extra_flags` (a later mapping replaces a value in
place and `null` drops a flag when rendered). `max_model_len: auto` becomes the memory plan's number
when the plan ran in this run (`planned`, the plan role's result, passed in by the task).
Offered to templates as `vllm_serve_flags(planned=...)`; `render`, `status` and the release all
render the release task's `flags:`, so they see this one result.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jinja2

AUTO = "auto"


def serve_flags(variables: Mapping[str, Any], planned: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The flag mapping for `provision.vllm.argv.serve_arguments` (pure)."""
    flags = {flag: variables[variable] for flag, variable in (variables["vllm_named_flags"] or {}).items()}
    context = flags.get("max-model-len")
    if context == AUTO and planned and planned.get("max_model_len"):
        flags["max-model-len"] = planned["max_model_len"]
    flags.update(variables.get("vllm_flags") or {})
    flags.update(variables.get("vllm_extra_flags") or {})
    return flags


@jinja2.pass_context
def vllm_serve_flags(context: jinja2.runtime.Context, planned: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Template function: `serve_flags` over the variables the template sees."""
    return serve_flags(context, planned)  # type: ignore[arg-type]  # a Context reads like a Mapping

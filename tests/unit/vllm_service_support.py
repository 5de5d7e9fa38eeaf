"""The vLLM service mapping the tests give the operations: the role's own `vllm_service`
(roles/vllm/defaults.yaml), rendered with the role defaults, so a test never restates a value the
role holds (the operations' types have no defaults of their own)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from provision.playbook.templating import Renderer, make_environment

ROLES = Path(__file__).resolve().parents[2] / "roles"
SERVED_NAME = "workhorse"


def role_service(**overrides: Any) -> dict[str, Any]:
    """`vllm_service` as the roles' defaults make it (served name `workhorse`), with `overrides`."""
    defaults: dict[str, Any] = {}
    for role in ("vllm", "smoke"):
        defaults.update(yaml.safe_load((ROLES / role / "defaults.yaml").read_text()))
    variables = {**defaults, "served_model_name": SERVED_NAME}
    service = Renderer(make_environment(), variables).render(defaults["vllm_service"])
    return {**service, **overrides}


# The unit's own settings as the tests of the unit file give them (the values the unit tests assert).
UNIT_SETTINGS: dict[str, Any] = {"command": ["vllm", "serve"], "docker": "/usr/bin/docker", "restart_sec": 10,
                                 "start_limit_interval_s": 900, "start_limit_burst": 5, "start_timeout_s": 1200,
                                 "stop_timeout_s": 30}
# The same for `vllm_release`'s arguments (its start timeout is the service's ready_timeout).
RELEASE_SETTINGS: dict[str, Any] = {
    "bind_address": "", "run_options": ["--gpus", "all", "--ipc=host"], "command": ["vllm", "serve"],
    "docker": "/usr/bin/docker", "restart_sec": 10, "start_limit_interval": 900, "start_limit_burst": 5,
    "stop_timeout": 30}

"""Operations by name, each imported the first time a task uses it.

A task names its operation (`apt:`), not a module, and one module may register several (`file` and
`template`), so `OPERATION_MODULES` says which module registers which name. Loading a playbook only
checks names against this table; an operation's module (and with it pydantic) is imported when a
task of it is first validated, so `up` reaches its first SSH connection without importing any.
`tests/unit/test_ops_registry.py` checks that every entry imports and registers exactly its names.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from provision.ops.base import Operation

#: operation name -> the module whose `@register` defines it (product operations included)
OPERATION_MODULES: dict[str, str] = {
    "apt": "provision.ops.apt",
    "apt_components": "provision.ops.apt_components",
    "apt_repository": "provision.ops.apt_repository",
    "bundle_copy": "provision.ops.bundle_copy",
    "command": "provision.ops.command",
    "debug": "provision.ops.debug",
    "directory": "provision.ops.directory",
    "docker_image": "provision.ops.docker_image",
    "docker_load": "provision.ops.docker_load",
    "dpkg_lock_wait": "provision.ops.dpkg_lock_wait",
    "fail": "provision.ops.fail",
    "file": "provision.ops.file",
    "generated_secret": "provision.ops.generated_secret",
    "hf_snapshot": "provision.ops.hf_snapshot",
    "ini": "provision.ops.ini",
    "json_merge": "provision.ops.json_merge",
    "lineinfile": "provision.ops.lineinfile",
    "memory_plan": "provision.vllm.ops.memory_plan",
    "mirror_choice": "provision.ops.mirror_choice",
    "reboot": "provision.ops.reboot",
    "systemd": "provision.ops.systemd",
    "template": "provision.ops.file",
    "verify": "provision.ops.verify",
    "vllm_memory": "provision.vllm.ops.vllm_memory",
    "vllm_release": "provision.vllm.ops.vllm_release",
    "vllm_rollback": "provision.vllm.ops.vllm_rollback",
    "vllm_smoke": "provision.vllm.ops.vllm_smoke",
    "wait_for": "provision.ops.wait_for",
}


class OperationTable(Mapping[str, "Operation"]):
    """The operations by name; looking one up imports its module the first time."""

    def __getitem__(self, name: str) -> Operation:
        module = OPERATION_MODULES[name]
        from provision.ops.base import REGISTERED

        if name not in REGISTERED:
            importlib.import_module(module)
        return REGISTERED[name]

    def __contains__(self, name: object) -> bool:
        return name in OPERATION_MODULES

    def __iter__(self) -> Iterator[str]:
        return iter(OPERATION_MODULES)

    def __len__(self) -> int:
        return len(OPERATION_MODULES)


REGISTRY = OperationTable()

__all__ = ["OPERATION_MODULES", "REGISTRY", "OperationTable"]

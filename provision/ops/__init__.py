"""Operations by name, each imported the first time a task uses it.

A task names its operation (`apt:`), not a module, and one module may register several (`file` and
`template`), so `OPERATION_MODULES` says which module registers which name: the generic operations
here, a product's through its hook (provision/products.py). Loading a playbook only checks names
against this table; an operation's module (and with it pydantic) is imported when a task of it is
first validated, so `up` reaches its first SSH connection without importing any.
`tests/unit/test_ops_registry.py` checks that every entry imports and registers exactly its names.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

from provision import products

if TYPE_CHECKING:
    from provision.ops.base import Operation

#: operation name -> the module whose `@register` defines it: the engine's, then the products' (their hooks)
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
    "mirror_choice": "provision.ops.mirror_choice",
    "reboot": "provision.ops.reboot",
    "systemd": "provision.ops.systemd",
    "template": "provision.ops.file",
    "verify": "provision.ops.verify",
    "wait_for": "provision.ops.wait_for",
    **products.operations(),
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

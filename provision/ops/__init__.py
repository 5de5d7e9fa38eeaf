"""Operations: importing this package registers every operation module in REGISTRY."""

import importlib
import pkgutil

from provision.ops.base import REGISTRY, Operation

for _module in pkgutil.iter_modules(__path__):
    if _module.name != "base":
        importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["REGISTRY", "Operation"]

"""Operations: importing this package registers every operation module in REGISTRY."""

import importlib
import pkgutil

from provision.ops.base import REGISTRY, Operation

#: packages of product-specific operations, registered here and nowhere else
PRODUCTS = ("provision.vllm.ops",)

for _module in pkgutil.iter_modules(__path__):
    if _module.name != "base":
        importlib.import_module(f"{__name__}.{_module.name}")
for _product in PRODUCTS:
    _package = importlib.import_module(_product)
    for _module in pkgutil.iter_modules(_package.__path__):
        importlib.import_module(f"{_product}.{_module.name}")

__all__ = ["REGISTRY", "Operation"]

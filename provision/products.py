"""The products beside the engine (vLLM, the office gateway, its metrics): what each adds to it.

A product registers itself through one hook: a `product.py` module in its own package of `provision`
defining `PRODUCT`, the operations it adds (name -> module, imported when a task first uses one) and
the functions it offers to templates (name -> "module:function", imported at a template's first call).
The engine's tables (`provision.ops.OPERATION_MODULES`, `provision.playbook.templating.FUNCTIONS`) are
its own entries and these, so no engine module names a product. A hook imports nothing of its
product: loading a playbook imports no product code.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

#: the module a product package holds its hook in
HOOK = "product"


@dataclass(frozen=True)
class Product:
    """What one product adds to the engine."""

    #: operation name -> the module whose `@register` defines it
    operations: Mapping[str, str] = field(default_factory=dict)
    #: template function name -> "module:function"
    template_functions: Mapping[str, str] = field(default_factory=dict)


@cache
def products() -> tuple[Product, ...]:
    """Every package of `provision` that holds a hook, in the order of its name."""
    root = Path(__file__).resolve().parent
    return tuple(importlib.import_module(f"{__package__}.{folder.name}.{HOOK}").PRODUCT
                 for folder in sorted(root.iterdir()) if (folder / f"{HOOK}.py").is_file())


def operations() -> dict[str, str]:
    """The operations every product adds: name -> module."""
    return {name: module for product in products() for name, module in product.operations.items()}


def template_functions() -> dict[str, str]:
    """The template functions every product offers: name -> "module:function"."""
    return {name: target for product in products() for name, target in product.template_functions.items()}

"""The engine never names the vLLM product or one of its operations: the product adds them through its
hook (provision/vllm/product.py, found by provision/products.py), and the bundle reads what a task
needs from the operation's own declaration (`Operation.offline_needs`)."""

from __future__ import annotations

import re
from pathlib import Path

from provision import products
from provision.ops import OPERATION_MODULES, REGISTRY
from provision.playbook.templating import FUNCTIONS
from provision.vllm.product import PRODUCT

PACKAGE = Path(__file__).resolve().parents[2] / "provision"
# the engine: the generic operations, the runner, playbooks, the bundle, and what they stand on
ENGINE = ("ops", "runner", "playbook", "bundle", "facts", "gpu", "settings", "inventory", "connection")


def engine_files() -> list[Path]:
    return sorted([*PACKAGE.glob("*.py"), *(f for name in ENGINE for f in (PACKAGE / name).rglob("*.py"))])


def test_no_engine_module_names_the_vllm_product_or_its_operations() -> None:
    operations = "|".join(map(re.escape, PRODUCT.operations))
    named = re.compile(rf"provision[./]vllm|[\"']({operations})[\"']")
    found = [f"{path.relative_to(PACKAGE)}:{number}: {line.strip()}" for path in engine_files()
             for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if named.search(line)]
    assert found == []


def test_the_products_operations_and_template_functions_come_through_their_hooks() -> None:
    assert PRODUCT in products.products()
    assert {name: OPERATION_MODULES[name] for name in PRODUCT.operations} == dict(PRODUCT.operations)
    assert {name: FUNCTIONS[name] for name in PRODUCT.template_functions} == dict(PRODUCT.template_functions)
    assert REGISTRY["vllm_release"].name == "vllm_release"


def test_the_bundle_reads_needs_only_from_operations_that_declare_them() -> None:
    declaring = sorted(name for name in OPERATION_MODULES if REGISTRY[name].offline_arguments)
    assert declaring == ["apt", "apt_components", "apt_repository", "docker_image", "hf_snapshot", "template"]

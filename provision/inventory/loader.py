"""`load_inventory`: read an inventory file, tell which of the two forms it is, validate it all.

Both forms are checked completely before any host is contacted; every problem is an InputError
naming the file, the line and the key. Whether private key files exist is checked later, for the
selected hosts only (`Inventory.check_key_files`).
"""

from __future__ import annotations

from pathlib import Path

from provision.errors import InputError
from provision.inventory.fleet import read_fleet
from provision.inventory.model import Inventory
from provision.inventory.single_host import SINGLE_HOST_KEYS, read_single_host
from provision.inventory.yaml_loader import load_yaml_file

FORMS_HINT = "a host file (`address: 192.168.1.50` ...) or a fleet inventory (`all:` with `hosts:` ...)"


def load_inventory(path: Path) -> Inventory:
    """The validated Inventory in `path`: a single-host file or an Ansible-style fleet YAML."""
    path = Path(path)
    doc = load_yaml_file(path)
    if doc.data is None:
        raise InputError(f"the file is empty; expected {FORMS_HINT}", path)
    if not isinstance(doc.data, dict):
        raise InputError(f"expected a mapping at the top, got {type(doc.data).__name__}; write {FORMS_HINT}",
                         path, doc.value_line(()))
    if _is_fleet(doc.data):
        return read_fleet(doc)
    return read_single_host(doc)


def _is_fleet(data: dict[object, object]) -> bool:
    """A fleet has `all:`, or only mappings (groups) at the top and no single-host key."""
    if "all" in data:
        return True
    if any(key in SINGLE_HOST_KEYS for key in data):
        return False
    return all(value is None or isinstance(value, dict) for value in data.values())

"""`load_inventory`: read an inventory, tell which form it is, validate it all.

Two forms: our single-host file (`address:`, `user:`, `key:`, `vars:` at the top, see
`single_host.py`), or an Ansible inventory (YAML or INI files, a folder of them, `h1,h2,`, with
group_vars/ and host_vars/, see `resolve.py`). Everything is checked before any host is contacted;
every problem is an InputError naming the file, the line and the key. Whether private key files
exist is checked later, for the selected hosts only (`Inventory.check_connectable`).
"""

from __future__ import annotations

from pathlib import Path

from provision.errors import InputError
from provision.inventory.model import Inventory
from provision.inventory.resolve import load_ansible_inventory
from provision.inventory.single_host import SINGLE_HOST_KEYS, read_single_host
from provision.inventory.sources import is_host_list
from provision.yaml_loader import load_yaml_file

FORMS_HINT = "a host file (`address: 192.168.1.50` ...) or an Ansible inventory (YAML `all:` with `hosts:`, or INI)"
YAML_SUFFIXES = (".yml", ".yaml")


def load_inventory(path: Path | list[Path], playbook_dir: Path | None = None, render: bool = True) -> Inventory:
    """The validated Inventory of `path` (or several Ansible inventory sources, read in order).

    `playbook_dir`: the folder whose group_vars/ and host_vars/ also apply (the playbook's).
    `render=False`: for listing, a connection variable written as a template is left as written
    (no lookup runs; the Host keeps the default for it), as `ansible-inventory --list` does."""
    sources = [Path(p) for p in path] if isinstance(path, list) else [Path(path)]
    if len(sources) == 1 and _is_single_host_file(sources[0]):
        return read_single_host(load_yaml_file(sources[0]))
    return load_ansible_inventory(sources, playbook_dir, render)


def _is_single_host_file(path: Path) -> bool:
    """A YAML file whose top level is a mapping with a host-file key (address, user, ...) and no
    group (`all:` or a mapping of groups); an empty or non-mapping YAML file is refused here."""
    if is_host_list(str(path)) or not path.is_file() or path.suffix not in YAML_SUFFIXES:
        return False
    try:
        doc = load_yaml_file(path)
    except InputError:
        return False  # not YAML: the Ansible reader tries INI and reports the error that helps
    if doc.data is None:
        raise InputError(f"the file is empty; expected {FORMS_HINT}", path)
    if not isinstance(doc.data, dict):
        if isinstance(doc.data, list):
            raise InputError(f"expected a mapping at the top, got list; write {FORMS_HINT}", path,
                             doc.value_line(()))
        return False  # a scalar: an INI file with a .yaml name, read as INI like Ansible does
    if "all" in doc.data or "plugin" in doc.data:
        return False
    if any(key in SINGLE_HOST_KEYS for key in doc.data):
        return True
    return not all(value is None or isinstance(value, dict) for value in doc.data.values())

"""Inventory sources as `ansible -i` takes them: a file, a folder of files, or `host1,host2,`.

A folder is read as Ansible reads it (ansible-core `InventoryManager.parse_source`): its entries in
sorted order, sub-folders recursively, skipping hidden names, `group_vars`, `host_vars`,
`vars_plugins` and files ending in .pyc .pyo .swp .bak ~ .rpm .md .txt .rst .orig .cfg .retry.
A file's format comes from its content: one that reads as a YAML mapping (and has no extension, or
.yml/.yaml/.json, as Ansible's yaml plugin requires) is a YAML inventory; anything else is INI.
What Ansible runs or decrypts is refused before any host is contacted, with the way out:
executable inventory scripts, inventory plugin configurations (`plugin:`), Vault-encrypted files.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import yaml

from provision.errors import InputError
from provision.input_files import folder_inside, read_input_text
from provision.inventory.fleet import read_yaml_inventory
from provision.inventory.graph import InventoryGraph
from provision.inventory.ini import read_ini
from provision.inventory.model import Origin
from provision.yaml_loader import load_yaml_text, refuse_vault_text

IGNORED_NAMES = re.compile(r"^\.|^host_vars$|^group_vars$|^vars_plugins$")
IGNORED_ENDINGS = (".pyc", ".pyo", ".swp", ".bak", "~", ".rpm", ".md", ".txt", ".rst", ".orig", ".cfg", ".retry")
YAML_EXTENSIONS = ("", ".yml", ".yaml", ".json")
STATIC_WAY_OUT = "write it out as a static inventory once: ansible-inventory -i {src} --list --export -y > static.yaml"


def is_host_list(source: str) -> bool:
    """`-i 'web1,web2,'`: a comma-separated list of hosts rather than a path (Ansible's host_list)."""
    return "," in source and not Path(source).exists()


def read_sources(graph: InventoryGraph, sources: list[Path]) -> None:
    """Read every inventory source into `graph`, in order."""
    for source in sources:
        if is_host_list(str(source)):
            for name in (part.strip() for part in str(source).split(",")):
                if name:
                    graph.add_host(name, "ungrouped", Origin(Path(str(source)), None, name))
            continue
        if not source.exists():
            raise InputError("inventory not found (a file, a folder of inventory files, or host1,host2,)", source)
        graph.sources.append(source)
        _read_path(graph, source, [])


def _read_path(graph: InventoryGraph, path: Path, above: list[Path]) -> None:
    if path.is_dir():
        inside = folder_inside(path, above)
        for entry in sorted(path.iterdir(), key=lambda p: p.name):
            if not IGNORED_NAMES.search(entry.name) and not entry.name.endswith(IGNORED_ENDINGS):
                _read_path(graph, entry, inside)
        return
    _read_file(graph, path)


def _read_file(graph: InventoryGraph, path: Path) -> None:
    text = read_input_text(path)
    refuse_vault_text(text, path)
    if text.startswith("#!") and os.access(path, os.X_OK):
        raise InputError("dynamic inventory scripts are not supported (this file is executable and starts"
                         f" with #!); {STATIC_WAY_OUT.format(src=path)}", path, 1)
    if path.suffix in YAML_EXTENSIONS and _looks_like_yaml_mapping(text):
        doc = load_yaml_text(text, path)
        if "plugin" in doc.data:
            raise InputError(f"inventory plugins are not supported (plugin: {doc.data['plugin']});"
                             f" {STATIC_WAY_OUT.format(src=path)}", path, doc.line(("plugin",)), "plugin")
        read_yaml_inventory(graph, doc)
        return
    try:
        read_ini(graph, path, text)
    except InputError:
        if path.suffix in YAML_EXTENSIONS[1:]:
            load_yaml_text(text, path)  # neither INI nor YAML: YAML's error is the one that helps
        raise


def _looks_like_yaml_mapping(text: str) -> bool:
    """True when `text` parses as YAML to a non-empty mapping (an INI file never does). Only the node
    tree is built (any tag goes: !env, !vault), by libyaml, which neither recurses in Python nor expands
    aliases: the document's bounds are checked when it is read for real."""
    try:
        node = yaml.compose(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError:
        return False
    return isinstance(node, yaml.MappingNode) and bool(node.value)

"""The files the tool under test reads to reach lab hosts: a fleet inventory and a known_hosts file."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import yaml


def render_inventory(hosts: Iterable[tuple[str, int]], variables: Mapping[str, Any]) -> str:
    """An Ansible-style YAML inventory: `variables` under all.vars, one entry per (name, ssh port)."""
    text = yaml.safe_dump({"all": {"vars": dict(variables)}}, sort_keys=False)
    text += "  hosts:\n"
    for name, port in hosts:
        entry = yaml.safe_dump({"ansible_host": "127.0.0.1", "ansible_port": port},
                               default_flow_style=True, sort_keys=False, width=1000)
        text += f"    {name}: {entry}"
    return text


def render_known_hosts(keys: Iterable[tuple[int, str]]) -> str:
    """known_hosts lines `[127.0.0.1]:PORT ssh-ed25519 AAAA...` for (ssh port, host key) pairs."""
    return "".join(f"[127.0.0.1]:{port} {key}\n" for port, key in keys)

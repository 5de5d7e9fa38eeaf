"""The inventory and known_hosts files the tool under test reads to reach lab hosts."""

from __future__ import annotations

import yaml

from tests.lab.inventory import render_inventory, render_known_hosts


def test_inventory_has_vars_and_one_entry_per_host_on_loopback() -> None:
    text = render_inventory([("lab1", 2201), ("lab2", 2207)],
                            {"ansible_user": "deploy", "ansible_ssh_private_key_file": "/lab/id_ed25519"})
    assert yaml.safe_load(text) == {"all": {
        "vars": {"ansible_user": "deploy", "ansible_ssh_private_key_file": "/lab/id_ed25519"},
        "hosts": {"lab1": {"ansible_host": "127.0.0.1", "ansible_port": 2201},
                  "lab2": {"ansible_host": "127.0.0.1", "ansible_port": 2207}}}}
    assert "    lab1: {ansible_host: 127.0.0.1, ansible_port: 2201}\n" in text


def test_known_hosts_lines_name_the_port_in_brackets() -> None:
    assert render_known_hosts([(2201, "ssh-ed25519 AAAA1"), (2202, "ssh-ed25519 AAAA2")]) == (
        "[127.0.0.1]:2201 ssh-ed25519 AAAA1\n[127.0.0.1]:2202 ssh-ed25519 AAAA2\n")

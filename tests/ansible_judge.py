"""What ansible-core itself makes of an inventory: the hosts each --limit pattern selects, and each
host's connection settings. Run as a script under the interpreter that has ansible-core installed:

    python -m tests.ansible_judge --inventory X [--playbook-dir D] --pattern P ... > judged.json

Patterns go through `InventoryManager.subset` + `get_hosts("all")`, the code path of
`ansible-playbook --limit P` and `ansible-inventory --limit P`. Connection settings are the
variables ansible-core's ssh connection plugin and sudo become plugin read (plugins/connection/
ssh.py `host`, `port`, `remote_user`, `private_key_file`; plugins/become/sudo.py), the last one
defined winning as in ansible's option resolution, rendered by ansible's own Templar. A setting
the Templar cannot render (a vault variable the checkout lacks, a collection's lookup) is listed
under `unrendered`: ansible-playbook fails on that host when it connects.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from ansible.errors import AnsibleError
from ansible.inventory.manager import InventoryManager
from ansible.module_utils.parsing.convert_bool import boolean
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar
from ansible.vars.manager import VariableManager

SETTINGS = {
    "address": ["ansible_host", "ansible_ssh_host"],
    "port": ["ansible_port", "ansible_ssh_port"],
    "user": ["ansible_user", "ansible_ssh_user"],
    "key": ["ansible_private_key_file", "ansible_ssh_private_key_file"],
    "become": ["ansible_become"],
    "become_user": ["ansible_become_user", "ansible_sudo_user"],
    "connection": ["ansible_connection"],
}
DEFAULTS = {"port": 22, "user": None, "key": None, "become": False, "become_user": "root", "connection": "ssh"}


def connection_settings(manager: InventoryManager, variables: VariableManager, loader: DataLoader) -> dict:
    settings = {}
    for host in manager.get_hosts("all"):
        hostvars = variables.get_vars(host=host, include_hostvars=False)
        templar = Templar(loader=loader, variables=hostvars)
        found: dict = {"address": host.name, **DEFAULTS}
        unrendered = {}
        for name, keys in SETTINGS.items():
            defined = [key for key in keys if key in hostvars]
            if defined:
                try:
                    found[name] = templar.template(hostvars[defined[-1]])
                except AnsibleError:
                    unrendered[name] = defined[-1]
        found["port"] = int(found["port"])
        found["become"] = boolean(found["become"])
        if found["key"]:
            found["key"] = os.path.abspath(os.path.expanduser(found["key"]))
        settings[host.name] = {**{k: v for k, v in found.items() if k not in unrendered},
                               **({"unrendered": unrendered} if unrendered else {})}
    return settings


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--inventory", action="append", required=True)
    parser.add_argument("--playbook-dir")
    parser.add_argument("--pattern", action="append", default=[])
    args = parser.parse_args()
    loader = DataLoader()
    if args.playbook_dir:
        loader.set_basedir(args.playbook_dir)
    manager = InventoryManager(loader=loader, sources=args.inventory)
    variables = VariableManager(loader=loader, inventory=manager)
    selected = {}
    for pattern in args.pattern:
        manager.subset(pattern)
        try:
            selected[pattern] = [host.name for host in manager.get_hosts("all")]
        except AnsibleError as error:
            selected[pattern] = f"error: {error}"
        manager.subset(None)
    json.dump({"patterns": selected, "connection": connection_settings(manager, variables, loader)}, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())

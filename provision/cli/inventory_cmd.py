"""`provision inventory INV [--list | --graph [GROUP] | --host NAME] [--limit P]`: what was resolved.

Like `ansible-inventory`: the hosts, the groups and every variable after precedence (group_vars
and host_vars next to the inventory and the playbook included), secrets as `***`; no host is
contacted and no key file needs to exist.
"""

from __future__ import annotations

from provision.cli.inputs import EXIT_OK, Invocation
from provision.errors import InputError
from provision.inventory.listing import inventory_graph, inventory_list, plain
from provision.secrets import REDACTOR


def cmd_inventory(inv: Invocation) -> int:
    args, inventory = inv.args, inv.read_inventory()
    hosts = inventory.select(args.limit)
    if args.host:
        if args.host not in inventory.hostvars:
            raise InputError(f"no host {args.host!r} in the inventory", inventory.path, key="--host")
        print(REDACTOR.json(plain(inventory.hostvars[args.host]), indent=4, sort_keys=True))
    elif args.graph:
        if args.graph not in inventory.groups:
            raise InputError(f"no group {args.graph!r} in the inventory", inventory.path, key="--graph")
        print(inventory_graph(inventory, hosts, args.graph))
    else:
        print(REDACTOR.json(inventory_list(inventory, hosts), indent=4, sort_keys=True))
    return EXIT_OK

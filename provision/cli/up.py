"""`provision up`: read and check the inputs, start connecting, then import and run the rest.

The order is the point: the inventory and the playbook are read and checked first (an input error
exits 2 before any host is contacted); then the first batch's connections start (runner/connect.py)
and only then are the runner, the operations and the output imported, while the handshakes wait on
the network and the hosts.
"""

from __future__ import annotations

import argparse

from rich.console import Console

from provision.cli.inputs import load_hosts, plays_of, timeouts_of, trace_of
from provision.inventory.model import Host, Inventory
from provision.playbook.model import Play
from provision.runner.batches import parse_serial
from provision.runner.connect import EarlyConnections, connect, first_batch


def cmd_up(args: argparse.Namespace, console: Console) -> int:
    if args.list_hosts or args.list_tasks:
        from provision.cli.commands import list_plays

        return list_plays(args, console)
    inventory, hosts = load_hosts(args)
    plays = plays_of(args)
    early = None
    if not args.bundle:  # a bundle is copied to each host first, on connections of its own
        early = start_connecting(args, console, inventory, hosts, plays)
    try:
        from provision.cli.commands import converge

        return converge(args, console, inventory, hosts, plays, early)
    finally:
        if early is not None:
            early.close_unused()


def start_connecting(args: argparse.Namespace, console: Console, inventory: Inventory, hosts: list[Host],
                     plays: list[Play]) -> EarlyConnections:
    """The connections of the hosts the run opens first, started now in the background."""
    serial = parse_serial(args.serial) if args.serial else None
    trace, timeouts = trace_of(args, console), timeouts_of(args)
    return EarlyConnections(first_batch(inventory, plays, hosts, serial),
                            lambda host: connect(host, args.trust_new_host_keys, trace, timeouts))

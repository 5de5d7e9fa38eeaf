"""`provision drain|undrain INVENTORY HOST` and the gateway part of `provision status`: the office
gateway's (roles/office_gateway) runtime API, reached over SSH on the gateway host as root.

A host is an office gateway when it is in the group its `office_gateway_group` names (`office_gateway`
by default). Drain: no new request goes to HOST, those in flight finish (waited for, up to --wait);
undrain: HOST is back in rotation once it passes its health checks. A state set here lasts across the
reloads of `up` (roles/office_gateway saves the servers' states before each reload).
"""

from __future__ import annotations

from typing import Any

from rich.table import Table
from rich.text import Text

from provision.cli.endpoints import serving_play
from provision.cli.fleet import on_each_host, run_on
from provision.cli.inputs import EXIT_FAILED, EXIT_OK, Invocation
from provision.connection.base import Connection
from provision.errors import InputError
from provision.inventory.model import Host, Inventory
from provision.office_gateway.admin import ServerView, admin_script, parse_users, parse_view
from provision.office_gateway.backends import BackendError, backends
from provision.settings.variables import host_variables, inventory_variables

DEFAULT_GROUP = "office_gateway"
ROLE = "office_gateway"


def gateway_hosts(hosts: list[Host]) -> list[Host]:
    return [host for host in hosts if str(host.vars.get("office_gateway_group", DEFAULT_GROUP)) in host.groups]


def gateway_sockets(inv: Invocation, gateways: list[Host]) -> dict[str, str]:
    """Each gateway's admin socket, as its role settings say."""
    play = serving_play(inv.plays, inv.playbook, role_name=ROLE)
    return {host.name: str(host_variables(play, host, inv.extra_vars)["office_gateway_admin_socket"])
            for host in gateways}


def backend_names(inventory: Inventory, gateway: Host) -> list[str]:
    """The gateway's servers, as its config names them (roles/office_gateway/templates/haproxy.cfg.j2)."""
    magic = inventory_variables(inventory)
    try:
        return [backend.name for backend in backends(
            magic["groups"], magic["hostvars"], cache_group=str(gateway.vars.get("office_cache_group", "office_cache")),
            gateway_group=str(gateway.vars.get("office_gateway_group", DEFAULT_GROUP)), default_port=1,
            default_max_requests=1)]
    except BackendError as error:
        raise InputError(str(error)) from error


def view_row(conn: Connection, script: str, wait_s: float = 0) -> dict[str, Any]:
    rc, stdout, stderr = run_on(conn, script, 60 + wait_s)
    servers, in_flight = parse_view(stdout)
    row: dict[str, Any] = {"servers": {server.name: vars(server) for server in servers}, "in_flight": in_flight,
                           "users": parse_users(stdout)}
    if rc != 0:
        row["error"] = (stderr.strip() or stdout.strip() or f"exit {rc}")[-500:]
    return row


def view_table(name: str, row: dict[str, Any]) -> Table:
    table = Table(title=f"OFFICE GATEWAY {name}", title_justify="left")
    for column in ("backend", "state", "in flight", "queued", "served", "last check"):
        table.add_column(column)
    for server in (ServerView(**fields) for fields in row.get("servers", {}).values()):
        style = "green" if server.status == "UP" else "yellow" if server.status in ("DRAIN", "NOLB") else "red"
        table.add_row(server.name, Text(server.status, style=style), str(server.in_flight), str(server.queued),
                      str(server.served), server.check)
    return table


def users_table(name: str, row: dict[str, Any]) -> Table | None:
    """Requests per office user (docs/office-users.md: tokens are not counted at the gateway); None
    when the gateway has no users."""
    if not row.get("users"):
        return None
    table = Table(title=f"OFFICE USERS {name} (requests since haproxy last started or reloaded)",
                  title_justify="left")
    table.add_column("user")
    table.add_column("requests", justify="right")
    for user, requests in sorted(row["users"].items()):
        table.add_row(user, str(requests))
    return table


def cmd_drain(inv: Invocation) -> int:
    return _set_state(inv, "drain")


def cmd_undrain(inv: Invocation) -> int:
    return _set_state(inv, "ready")


def _set_state(inv: Invocation, state: str) -> int:
    args, console = inv.args, inv.console
    if args.wait < 0:
        raise InputError("--wait must be at least 0 seconds")
    args.limit = None  # the gateway and the backend are both found in the whole inventory
    inventory, hosts = inv.hosts()
    gateways = gateway_hosts(hosts)
    if not gateways:
        raise InputError(f"the inventory has no host in the {DEFAULT_GROUP!r} group (the office gateway)",
                         file=hosts[0].source if hosts else None)
    for gateway in gateways:
        names = backend_names(inventory, gateway)
        if args.host not in names:
            raise InputError(f"{args.host!r} is not a backend of the office gateway {gateway.name}; "
                             f"its backends: {', '.join(names) or 'none'}")
    sockets = gateway_sockets(inv, gateways)
    rows = on_each_host(inv, gateways, lambda host, conn: view_row(
        conn, admin_script(sockets[host.name], state, args.host, args.wait), args.wait))
    failed = False
    for name, row in rows.items():
        console.print(view_table(name, row))
        if "error" in row:
            console.print(Text(f"{name}: {row['error']}", style="bold red"))
            failed = True
        elif state == "drain" and row["in_flight"]:
            console.print(Text(f"{name}: {args.host} drained, but {row['in_flight']} request(s) still in flight "
                               f"after {args.wait} s", style="yellow"))
            failed = True
        else:
            done = "drained: no request in flight" if state == "drain" else "back in rotation (once its checks pass)"
            console.print(f"{name}: {args.host} {done}")
    return EXIT_FAILED if failed else EXIT_OK


def gateway_rows(inv: Invocation, hosts: list[Host]) -> dict[str, dict[str, Any]]:
    """`provision status`: each selected gateway's view of its backends."""
    gateways = gateway_hosts(hosts)
    if not gateways:
        return {}
    sockets = gateway_sockets(inv, gateways)
    return on_each_host(inv, gateways, lambda host, conn: view_row(conn, admin_script(sockets[host.name], "show")))

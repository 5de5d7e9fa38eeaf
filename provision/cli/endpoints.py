"""Where the served model answers: the serving play of a playbook, and the lines `up` ends with."""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Any

from provision.errors import InputError
from provision.inventory.model import Host, Inventory
from provision.playbook.model import Play
from provision.runner.results import RunResult
from provision.settings.variables import host_variables
from provision.shell import quote

SERVING_ROLE = "vllm"


def serving_play(plays: list[Play], source: Path, role_name: str = SERVING_ROLE) -> Play:
    """The play that holds the role `role_name` (the vllm role by default)."""
    for play in plays:
        if any(role.name == role_name for role in play.roles):
            return play
    raise InputError(f"no play of the playbook has the {role_name!r} role", file=source)


def endpoint_lines(plays: list[Play], playbook: Path, inventory: Inventory, result: RunResult,
                   extra_vars: dict[str, Any]) -> list[str]:
    """For each host whose run included the serving role and did not fail: the endpoint URL and where
    its API key lives (never the key itself)."""
    try:
        play = serving_play(plays, playbook)
    except InputError:
        return []
    lines = []
    for name, host_result in result.hosts.items():
        served = any(task.role == SERVING_ROLE for task in host_result.tasks)
        if host_result.failed or host_result.unreachable or not served:
            continue
        host = inventory.host(name)
        variables = host_variables(play, host, extra_vars)
        bind = str(variables.get("vllm_bind_address") or "")
        address = bind if bind and bind != "0.0.0.0" else host.address
        url = f"http://{address}:{variables.get('vllm_port')}/v1"
        key = ("the inventory's vllm_api_key" if variables.get("vllm_api_key")
               else f"{variables.get('vllm_api_key_file')} on the host (root only)")
        verb = "would serve" if result.check else "serves"
        lines.append(f"{name} {verb} {variables.get('served_model_name')} at {url}; API key: {key}"
                     + tunnel_hint(host, int(variables["vllm_port"]), bind))
    return lines


GATEWAY_ROLE = "office_gateway"


def office_gateways(plays: list[Play], playbook: Path, inventory: Inventory, result: RunResult,
                    extra_vars: dict[str, Any]) -> list[tuple[str, Host, dict[str, Any]]]:
    """Each office gateway whose run included its role and did not fail: its name, host and variables."""
    try:
        play = serving_play(plays, playbook, GATEWAY_ROLE)
    except InputError:
        return []
    gateways = []
    for name, host_result in result.hosts.items():
        if host_result.failed or host_result.unreachable or not any(
                task.role == GATEWAY_ROLE for task in host_result.tasks):
            continue
        host = inventory.host(name)
        gateways.append((name, host, host_variables(play, host, extra_vars)))
    return gateways


def office_url(host: Host, variables: dict[str, Any], path: str) -> str:
    """The office endpoint's URL of `path` on this gateway: https with the user's certificate
    (docs/office-users.md)."""
    scheme = "https" if variables.get("office_gateway_tls_certificate") else "http"
    return f"{scheme}://{office_address(host, variables)}:{variables.get('office_gateway_port')}{path}"


def office_lines(plays: list[Play], playbook: Path, inventory: Inventory, result: RunResult,
                 extra_vars: dict[str, Any]) -> list[str]:
    """For each office gateway whose run included its role and did not fail: the one URL of the office."""
    verb = "would be" if result.check else "is"
    return [f"the office endpoint {verb} {office_url(host, variables, '/v1')} ({name}: every model server of "
            "the inventory behind it)"
            for name, host, variables in office_gateways(plays, playbook, inventory, result, extra_vars)]


def office_address(host: Host, variables: dict[str, Any]) -> str:
    """The address users reach the gateway by: office_gateway_address, else its inventory address."""
    address = str(variables.get("office_gateway_address") or "")
    return host.address if not address or "{{" in address else address


def _loopback(address: str) -> bool:
    try:
        return address == "localhost" or ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


def tunnel_hint(host: Host, port: int, bind: str) -> str:
    """How to reach an endpoint this machine cannot open at its URL: a host reached through a
    forwarded SSH port on this machine's loopback (the lab's laptops: only SSH is forwarded), or a
    service bound to the host's own loopback. Empty when the URL answers from here as it is."""
    if host.is_local or not (_loopback(bind) or (_loopback(host.address) and host.port != 22)):
        return ""
    login = f"{host.user}@{host.address}" if host.user else host.address
    options = (f" -p {host.port}" if host.port != 22 else "") + (f" -i {quote(str(host.key))}" if host.key else "")
    return (f"; only SSH reaches {host.address}:{host.port} from here: open the endpoint with "
            f"`ssh -N -L {port}:127.0.0.1:{port}{options} {quote(login)}`, then use http://127.0.0.1:{port}/v1")

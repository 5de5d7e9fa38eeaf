"""The gateway's backends, read from the inventory: every host that serves the model, with the address,
port and request limit the gateway uses for it.

A template function (`office_gateway_backends()` in roles/office_gateway/templates/haproxy.cfg.j2), so
the list is built once, in Python, and every value is checked before it reaches HAProxy's config: an
address or port read from another host's variables (that host may not be selected, so the settings
check has not seen it) is refused here, naming the host and the variable.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import jinja2

from provision.settings.formats import FORMATS

# HAProxy's proxy and server names: letters, digits, '-', '_', '.' and ':' (cfgparse.c invalid_char).
SERVER_NAME = re.compile(r"[A-Za-z0-9_.:-]+")
BACKEND = "vllm"


@dataclass(frozen=True)
class Backend:
    """One GPU host as the gateway sees it."""

    name: str
    address: str
    port: int
    max_requests: int


class BackendError(ValueError):
    """A backend's variable HAProxy cannot take (the message names the host and the variable)."""


def _number(host: str, key: str, value: Any, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise BackendError(f"host {host}: {key} must be an integer from {low} to {high}, got {value!r}")
    return value


def _truth(value: Any) -> bool:
    return value if isinstance(value, bool) else str(value).strip().lower() in ("true", "yes", "1", "on")


def backends(groups: Mapping[str, list[str]], hostvars: Mapping[str, Mapping[str, Any]], *, cache_group: str,
             gateway_group: str, default_port: int, default_max_requests: int) -> list[Backend]:
    """Every host of the inventory that is a backend: not in the cache or gateway group, unless its
    `office_gateway_backend` says so; its address, vLLM port and max_num_seqs, each checked."""
    others = set(groups.get(cache_group, [])) | set(groups.get(gateway_group, []))
    found = []
    for name in groups.get("all", []):
        own = hostvars.get(name, {})
        if not _truth(own.get("office_gateway_backend", name not in others)):
            continue
        if not SERVER_NAME.fullmatch(name):
            raise BackendError(f"host {name!r}: HAProxy takes only letters, digits, '-', '_', '.' and ':' in a "
                               "server name; rename the host, or set office_gateway_backend: false for it")
        address = own.get("office_gateway_backend_address", own.get("address", ""))
        if not isinstance(address, str) or not FORMATS["host"].pattern.fullmatch(address):
            raise BackendError(f"host {name}: office_gateway_backend_address must be a host name or IP address, "
                               f"got {address!r}")
        port = _number(name, "office_gateway_backend_port",
                       own.get("office_gateway_backend_port", own.get("vllm_port", default_port)), 1, 65535)
        limit = _number(name, "max_num_seqs", own.get("max_num_seqs", default_max_requests), 1, 65536)
        found.append(Backend(name, address, port, limit))
    return found


@jinja2.pass_context
def office_gateway_backends(context: jinja2.runtime.Context) -> list[Backend]:
    """Template function: `backends` over the variables the template sees."""
    return backends(context.get("groups") or {}, context.get("hostvars") or {},
                    cache_group=str(context["office_cache_group"]), gateway_group=str(context["office_gateway_group"]),
                    default_port=int(context["vllm_port"]), default_max_requests=int(context["max_num_seqs"]))

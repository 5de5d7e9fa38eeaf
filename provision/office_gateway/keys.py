"""What `up` checks and makes for the office gateway before any host is contacted: the users and their
keys (users.py: each entry, the fleet's one backend key), the TLS certificate and key files on the
controller; then the users' missing keys are generated (not in check mode) and returned, to be shown
once. Every problem is an InputError naming the gateway's inventory file and the key (exit 2)."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

from provision.errors import InputError
from provision.inventory.model import Host, Inventory
from provision.office_gateway.backends import BackendError
from provision.office_gateway.users import UsersError, backend_key, declared, generate

GROUP = "office_gateway"
TLS_KEYS = ("office_gateway_tls_certificate", "office_gateway_tls_key")


def _value(host: Host, extra_vars: dict[str, Any], key: str, default: Any = None) -> Any:
    return extra_vars[key] if key in extra_vars else host.vars.get(key, default)


def check_tls(host: Host, extra_vars: dict[str, Any]) -> None:
    """Both files given or neither; each a readable regular file on the controller holding PEM."""
    paths = {key: _value(host, extra_vars, key, "") for key in TLS_KEYS}
    given = [key for key, path in paths.items() if path]
    if len(given) == 1:
        missing = next(key for key in TLS_KEYS if key not in given)
        raise InputError(f"{given[0]} is set, so {missing} must be too (HAProxy needs the certificate and its "
                         "private key)", host.source, key=missing)
    for key, path in paths.items():
        if not path:
            continue
        if not isinstance(path, str) or "{{" in path:
            raise InputError("must be the path of a file on this machine (no template)", host.source, key=key)
        file = Path(path).expanduser()
        try:
            with open(file, "rb") as opened:
                if not stat.S_ISREG(os.fstat(opened.fileno()).st_mode):
                    raise InputError(f"{file} is not a regular file", host.source, key=key)
                head = opened.read(1 << 20)
        except OSError as error:
            raise InputError(f"cannot read {file}: {error.strerror}", host.source, key=key) from error
        if b"-----BEGIN " not in head:
            raise InputError(f"{file} holds no PEM block (-----BEGIN ...)", host.source, key=key)


def prepare(inventory: Inventory, hosts: list[Host], extra_vars: dict[str, Any],
            check: bool) -> dict[str, dict[str, str]]:
    """Check every selected gateway's users, backend key and TLS files; generate the users' missing keys
    unless `check`. Returns gateway -> {user: new key}."""
    from provision.settings.variables import inventory_variables

    made: dict[str, dict[str, str]] = {}
    for host in hosts:
        group = str(_value(host, extra_vars, "office_gateway_group", GROUP))
        if group not in host.groups:
            continue
        check_tls(host, extra_vars)
        raw = _value(host, extra_vars, "office_users")
        try:
            users = declared(raw)
            if users:
                magic = inventory_variables(inventory)
                fleet = backend_key(magic["groups"], magic["hostvars"], gateway_group=group,
                                    cache_group=str(_value(host, extra_vars, "office_cache_group", "office_cache")))
                shared = [user.name for user in users if user.key is not None and user.key.reveal() == fleet]
                if shared:
                    raise UsersError(f"the key of {', '.join(shared)} is the backends' vllm_api_key: a user's key "
                                     "must be the user's own (it could not be revoked)")
                made[host.name] = {} if check else generate(host.name, users)
        except (UsersError, BackendError) as error:
            raise InputError(str(error), host.source, key="office_users") from error
    return made

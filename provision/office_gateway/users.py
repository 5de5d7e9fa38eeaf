"""The office's users and their keys (`office_users` of the gateway host): who may use the office
endpoint, and the one key the gateway sends the backends instead (docs/office-users.md).

Each user is a name and a key. A key written in the inventory must be `!secret VALUE` or `!env NAME`
(a Secret, masked everywhere); a user without a key gets one generated on the controller by `up`
(never in check mode), kept in a 0600 file in a 0700 folder of the user's config
(`$XDG_CONFIG_HOME/provision/office-users/GATEWAY.json`) and shown once, on a terminal only. A user
removed from the list loses a generated key too, so a user added again gets a new one.

The gateway (HAProxy) gets two root-only map files: key -> user, and `backend` -> the fleet's
`vllm_api_key`, which it puts in the Authorization header of every request it passes on; so that key
must be one value for every backend (checked before any host is contacted, and again where the map
is rendered, as backends.py does for the servers).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2

from provision.office_gateway.backends import backends
from provision.secrets import REDACTOR, Secret

#: a user's name: it is a value in HAProxy's map and a key of its stick table (no whitespace, no `#`)
USER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}")
#: what an Authorization header can carry (RFC 6750's b64token) and a map file's key can hold
KEY = re.compile(r"[A-Za-z0-9._~+/=-]{16,256}")
GENERATED_BYTES = 32  # secrets.token_urlsafe: 43 characters


class UsersError(ValueError):
    """An `office_users` entry, or the fleet's backend key, the gateway cannot take (the message says
    which user or host and which key)."""


@dataclass(frozen=True)
class User:
    name: str
    key: Secret | None  # None: generated on the controller


def declared(raw: Any) -> list[User]:
    """The users `office_users` lists, each checked: a list of {name, key} with unique names, each key
    a Secret (`!secret`/`!env`) of token characters, or no key (generated)."""
    if raw in (None, ""):
        return []
    if not isinstance(raw, list):
        raise UsersError("office_users must be a list of users ({name: NAME, key: !env VARIABLE}), "
                         f"got {type(raw).__name__}")
    users: list[User] = []
    for index, entry in enumerate(raw):
        where = f"office_users[{index}]"
        if not isinstance(entry, Mapping) or set(entry) - {"name", "key"} or "name" not in entry:
            raise UsersError(f"{where} must be a mapping with name and, optionally, key (nothing else), "
                             f"got {entry if not isinstance(entry, Mapping) else sorted(map(str, entry))!r}")
        name = entry["name"]
        if not isinstance(name, str) or not USER_NAME.fullmatch(name):
            raise UsersError(f"{where}.name must be 1-64 letters, digits, _ . @ - (starting with a letter or "
                             f"digit), got {name!r}")
        if any(user.name == name for user in users):
            raise UsersError(f"{where}.name {name!r} is listed twice")
        key = entry.get("key")
        if key is not None and not isinstance(key, Secret):
            raise UsersError(f"{where}.key of {name} must be `!secret VALUE` or `!env VARIABLE` (so it is masked "
                             "in every output), or left out to have one generated")
        if key is not None and not KEY.fullmatch(key.reveal()):
            raise UsersError(f"{where}.key of {name} must be 16-256 characters of letters, digits and . _ ~ + / = -")
        if key is not None and any(user.key == key for user in users):
            raise UsersError(f"{where}.key of {name} is the key of another user")
        users.append(User(name, key))
    return users


def store_path(gateway: str) -> Path:
    """The controller file of the generated keys of the users of `gateway` (an inventory host name)."""
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", gateway).lstrip(".") or "_"
    return Path(base) / "provision" / "office-users" / f"{safe}.json"


def read_store(path: Path) -> dict[str, str]:
    """User -> generated key, each registered with the redactor as it is read; {} when there is none."""
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as error:
        raise UsersError(f"the office users' generated keys in {path} cannot be read ({error}); fix or remove "
                         "the file (its users then get new keys)") from error
    if not isinstance(data, dict) or not all(isinstance(v, str) and KEY.fullmatch(v) for v in data.values()):
        raise UsersError(f"{path} is not a file of generated keys ({{user: key}}); fix or remove it")
    REDACTOR.add_all(data.values())
    return {str(name): key for name, key in data.items()}


def write_store(path: Path, keys: dict[str, str]) -> None:
    """The generated keys, written whole (a temporary file renamed over the old), 0600 in a 0700 folder."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(path.parent, 0o700)
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")  # mkstemp: 0600
    try:
        with os.fdopen(fd, "w") as file:
            json.dump(keys, file, indent=1, sort_keys=True)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def generate(gateway: str, users: list[User]) -> dict[str, str]:
    """Keys for the listed users that have none (made here, kept in the store), and the removed users'
    generated keys dropped; returns the new ones (user -> key), to be shown once."""
    path = store_path(gateway)
    kept = read_store(path)
    wanted = {user.name for user in users if user.key is None}
    keys = {name: key for name, key in kept.items() if name in wanted}
    made = {name: secrets.token_urlsafe(GENERATED_BYTES) for name in sorted(wanted - set(keys))}
    REDACTOR.add_all(made.values())
    if made or keys != kept:
        write_store(path, {**keys, **made})
    return made


def user_keys(gateway: str, raw: Any) -> list[tuple[str, str]]:
    """(key, user) for the map: the inventory's keys and the generated ones; a user whose key has not
    been generated yet (a check run, a `render` before the first `up`) is left out."""
    users = declared(raw)
    stored = read_store(store_path(gateway)) if any(user.key is None for user in users) else {}
    pairs = [(user.key.reveal() if user.key is not None else stored.get(user.name, ""), user.name) for user in users]
    return [(key, name) for key, name in pairs if key]


def backend_key(groups: Mapping[str, list[str]], hostvars: Mapping[str, Mapping[str, Any]], *, cache_group: str,
                gateway_group: str) -> str:
    """The one `vllm_api_key` of every backend: the key the gateway sends them in place of the user's."""
    found: dict[str, str] = {}
    for backend in backends(groups, hostvars, cache_group=cache_group, gateway_group=gateway_group,
                            default_port=1, default_max_requests=1):
        value = hostvars.get(backend.name, {}).get("vllm_api_key", "")
        if isinstance(value, Secret):
            value = value.reveal()
        if not isinstance(value, str) or "{{" in value or "{%" in value:
            raise UsersError(f"host {backend.name}: vllm_api_key must be a plain value, !secret or !env when the "
                             "office gateway has office_users (the gateway sends it to every backend)")
        found[backend.name] = value
    values = set(found.values())
    if not found or values == {""} or len(values) > 1:
        hosts = ", ".join(f"{name} ({'set' if value else 'none: generated per host'})" for name, value in found.items())
        raise UsersError("office_users needs one vllm_api_key for every backend (the gateway sends it in place of the "
                         "user's key): set it once, e.g. `vllm_api_key: !env VLLM_API_KEY` in all's vars; backends: "
                         + (hosts or "none") + ("; they differ" if len(values - {''}) > 1 else ""))
    return values.pop()


@jinja2.pass_context
def office_gateway_users(context: jinja2.runtime.Context) -> list[tuple[str, str]]:
    """Template function: (key, user) of the gateway's users, for its map file."""
    return user_keys(str(context["inventory_hostname"]), context.get("office_users"))


@jinja2.pass_context
def office_gateway_backend_key(context: jinja2.runtime.Context) -> str:
    """Template function: the fleet's one backend key."""
    return backend_key(context.get("groups") or {}, context.get("hostvars") or {},
                       cache_group=str(context["office_cache_group"]),
                       gateway_group=str(context["office_gateway_group"]))

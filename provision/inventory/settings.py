"""A connection setting's value, checked and normalised where it was written (file:line:key).

Values are read as Ansible reads them: a port may be written `2222` or `"2222"`, `become` takes
Ansible's booleans (`yes`, `true`, `1`, `on` ...; ansible-core module_utils/parsing/convert_bool),
`ssh`, `smart` and `paramiko` all mean SSH. A private key path is resolved as Ansible's ssh plugin
leaves it to ssh (`os.path.expanduser`, then relative to the working directory) in an Ansible
inventory, and relative to the file in our host.yaml; `known_hosts` always relative to its file.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from provision.errors import InputError
from provision.inventory.model import Origin
from provision.secrets import Secret

SSH_CONNECTIONS = ("ssh", "smart", "paramiko", "paramiko_ssh")  # Ansible's names for "over SSH"
TRUE_WORDS = ("y", "yes", "on", "1", "true", "t")
FALSE_WORDS = ("n", "no", "off", "0", "false", "f")
BECOME_METHODS = ("sudo",)
WHAT = {"address": "a host name or IP address", "user": "a user name", "become_user": "a user name",
        "key": "the path of a private key file", "known_hosts": "the path of a known_hosts file"}


def check_setting(name: str, value: Any, origin: Origin, keys_relative_to: Path | None) -> Any:
    """`value` of the Host field `name`, validated; InputError at `origin` when it cannot be one.

    `keys_relative_to`: the folder a relative private key path is taken from (None: the working
    directory, as Ansible does)."""
    def refuse(expected: str) -> InputError:
        shown = "a !secret/!env value" if isinstance(value, Secret) else f"{value!r}"
        return InputError(f"expected {expected}, got {shown}", origin.file, origin.line, origin.key)

    if name == "become_password":
        if isinstance(value, (dict, list)) or value is None:
            raise refuse("a password (a string)")
        return value if isinstance(value, Secret) else Secret(str(value))
    if name == "port":
        if isinstance(value, str) and value.strip().isdigit():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 65535:
            raise refuse("an integer from 1 to 65535")
        return value
    if name == "become":
        word = value.strip().lower() if isinstance(value, str) else value
        if word in TRUE_WORDS or word is True or (type(word) in (int, float) and word == 1):
            return True
        if word in FALSE_WORDS or word is False or (type(word) in (int, float) and word == 0):
            return False
        raise refuse("true or false")
    if name == "connection":
        if value == "local":
            return "local"
        if value in SSH_CONNECTIONS:
            return "ssh"
        raise refuse("'ssh' or 'local'")
    if name == "become_method":
        if value not in BECOME_METHODS:
            raise refuse("'sudo' (the only become method provision has)")
        return value
    if not isinstance(value, str) or not value.strip() or (name != "key" and any(c.isspace() for c in value)):
        raise refuse(f"{WHAT[name]} (a string)")
    if name == "address" and "@" in value:
        raise InputError(f"expected a host name or IP address, got {value!r}; put the user in user: (ansible_user)",
                         origin.file, origin.line, origin.key)
    if name == "key":
        return resolve_path(value, keys_relative_to)
    if name == "known_hosts":
        return resolve_path(value, origin.file.parent)
    return value


def resolve_path(value: str, folder: Path | None) -> Path:
    """`value` with `~` expanded, relative to `folder` (None: the working directory)."""
    path = Path(os.path.expanduser(value))
    if not path.is_absolute():
        path = (folder.absolute() if folder is not None else Path.cwd()) / path
    return Path(os.path.normpath(path))

"""Secret marking of the values read from an inventory or `-e`: a plain string under a
secret-looking name prints as `***`. (How a host's variables are layered: settings/variables.py.)"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from provision.secrets import Secret, is_secret_key


def mark_secrets(variables: Mapping[str, Any]) -> dict[str, Any]:
    """Copy of `variables` where plain strings under secret-looking names (hf_token, api_key,
    ...) are Secrets, at any depth of nested mappings and lists, so they print as `***`."""
    return {key: _mark(key, value) for key, value in variables.items()}


def _mark(key: object, value: Any) -> Any:
    if isinstance(value, str) and isinstance(key, str) and is_secret_key(key):
        return Secret(value)
    if isinstance(value, Mapping):
        return mark_secrets(value)
    if isinstance(value, list):
        return [_mark(key, item) for item in value]
    return value

"""Variable layering and secret marking: how the values a task sees are put together.

The runner merges, lowest to highest precedence:
    role defaults < play vars < inventory vars (group vars < host vars, already merged in
    `Host.vars`) < extra vars (`-e`).
Unlike Ansible, inventory vars beat play vars here: a host.yaml override such as
`max_model_len: 65536` is the user's word about that machine and must win over the playbook.

Merging is Ansible's default `hash_behaviour=replace`: a later layer's value replaces the earlier
one whole, dicts included; there is no deep merge. So overriding one field of a dict variable means
restating the whole dict, which keeps what a host gets readable from one place.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from provision.secrets import Secret, is_secret_key


def merge_vars(*layers: Mapping[str, Any]) -> dict[str, Any]:
    """One dict of all `layers`, later layers winning key by key (values replaced, never deep-merged)."""
    merged: dict[str, Any] = {}
    for layer in layers:
        merged.update(layer)
    return merged


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

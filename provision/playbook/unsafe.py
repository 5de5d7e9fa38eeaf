"""Data that is never rendered: what a host, a mirror or a bundle sent (facts, registered results,
a bundle's manifest) is marked unsafe where it enters the variables, and the renderer returns it
verbatim.

Ansible's precedent is `AnsibleUnsafeText` (ansible.utils.unsafe_proxy: "a str subclass that is
never templated"; https://docs.ansible.com/ansible/latest/porting_guides/porting_guide_2.8.html,
CVE-2019-10156): a local user on a GPU host who names a process `{{ ... }}` must not get a template
of theirs rendered on the controller. An unsafe string is still a `str`: it compares, hashes,
filters, matches and formats as one; only the renderer treats it differently.
"""

from __future__ import annotations

from typing import Any

import yaml


class UnsafeText(str):
    """A string that came from outside (a host, a mirror, a bundle): used as text, never as a template."""

    __slots__ = ()


def mark_unsafe(value: Any) -> Any:
    """`value` with every string in it (through dicts, lists and tuples) an UnsafeText; other values
    (numbers, booleans, None, Secrets) as they are. A new container: the caller's is left alone."""
    if isinstance(value, str):
        return value if isinstance(value, UnsafeText) else UnsafeText(value)
    if isinstance(value, dict):
        return {mark_unsafe(key): mark_unsafe(item) for key, item in value.items()}
    if isinstance(value, list):
        return [mark_unsafe(item) for item in value]
    if isinstance(value, tuple):
        return tuple(mark_unsafe(item) for item in value)
    return value


# `to_yaml` and anything else that dumps a value read from a host writes it as the plain string it is
# (SafeDumper looks representers up by exact type)
yaml.SafeDumper.add_representer(UnsafeText, yaml.representer.SafeRepresenter.represent_str)

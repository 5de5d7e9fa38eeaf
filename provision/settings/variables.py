"""A host's variables: the one place that knows their precedence and where each value was set.

Lowest to highest precedence:
    role defaults < the profiles they select (`model:`, settings/profiles.py) < play vars
    < inventory vars (group vars < host vars, already merged in `Host.vars`) < extra vars (`-e`).
Unlike Ansible, inventory vars beat play vars here: a host.yaml override such as
`max_model_len: 65536` is the user's word about that machine and must win over the playbook.
A profile is chosen by the merged value of its variable (a play, host or `-e` may pick another model).

Merging is Ansible's default `hash_behaviour=replace`: a later layer's value replaces the earlier
one whole, dicts included; there is no deep merge. So overriding one field of a dict variable means
restating the whole dict, which keeps what a host gets readable from one place.

`layered` is that order, for plain values (a run: `host_variables`) and for values that carry their
origin (`Value`: `provision vars` and the settings check, through `effective`), so what `vars` shows
and the check names is what `up` uses.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from provision.inventory.model import Host, Inventory
from provision.settings import profiles
from provision.settings.spec import Option, Specs
from provision.yaml_loader import load_yaml_file

if TYPE_CHECKING:  # the playbook layer sits above this one
    from provision.playbook.model import Play

EXTRA_VARS = "-e"
INVENTORY = "inventory"
ROLE_DEFAULT = "role default"
PLAY_VARS = "play vars"
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Value:
    """One effective variable: its value and where it was set (file None: `-e`, or not known)."""

    value: Any
    file: Path | None
    line: int | None
    layer: str  # "role default (ROLE)", "PROFILE_VAR profile (NAME)", "play vars (PLAY)", "inventory", "-e"

    @property
    def where(self) -> str:
        if self.file is None:
            return EXTRA_VARS
        return f"{self.file}:{self.line}" if self.line else str(self.file)


def merge_vars(*layers: Mapping[str, Any]) -> dict[str, Any]:
    """One dict of all `layers`, later layers winning key by key (values replaced, never deep-merged)."""
    merged: dict[str, Any] = {}
    for layer in layers:
        merged.update(layer)
    return merged


class Placing(Protocol[T]):
    """How `layered` reads an item (its value, and where a profile it names was set) and makes one
    of a profile's values."""

    def read(self, item: T, option: Option) -> tuple[Any, tuple[Path | str | None, int | None]]: ...

    def make(self, item: profiles.ProfileValue, layer: str) -> T: ...


class _Plain:
    """Plain values, as a task sees them; a bad profile name is reported at its declaration."""

    @staticmethod
    def read(item: Any, option: Option) -> tuple[Any, tuple[Path | str | None, int | None]]:
        return item, (option.file, option.line)

    @staticmethod
    def make(item: profiles.ProfileValue, layer: str) -> Any:
        return item.value


class _Placed:
    """`Value`s, each with where it was set; a bad profile name is reported where it was set."""

    @staticmethod
    def read(item: Value, option: Option) -> tuple[Any, tuple[Path | str | None, int | None]]:
        known = item.file is not None or item.layer == EXTRA_VARS
        return item.value, (item.file, item.line) if known else (option.file, option.line)

    @staticmethod
    def make(item: profiles.ProfileValue, layer: str) -> Value:
        return Value(item.value, item.file, item.line, layer)


PLAIN: Placing[Any] = _Plain()
PLACED: Placing[Value] = _Placed()


def layered(role_defaults: Mapping[str, T], play_vars: Mapping[str, T], inventory: Mapping[str, T],
            extra_vars: Mapping[str, T], specs: Specs, placed: Placing[T]) -> dict[str, T]:
    """Every variable of the layers merged in precedence order, the selected profiles in their place.
    `placed` says how an item of the layers (a plain value or a `Value`) is read and made, so a run
    and `provision vars` share this one order."""
    chosen = merge_vars(role_defaults, play_vars, inventory, extra_vars)
    selected: dict[str, T] = {}
    for option in specs.profile_options:
        if option.name in chosen:
            name, where = placed.read(chosen[option.name], option)
            layer = f"{option.name} profile ({name})"
            values = profiles.selected(option, name, where)
            selected.update({key: placed.make(item, layer) for key, item in values.items()})
    return merge_vars(role_defaults, selected, play_vars, inventory, extra_vars)


def with_profiles(role_defaults: Mapping[str, Any], specs: Specs) -> dict[str, Any]:
    """Role defaults with the profiles they select by default applied (the default model's settings)."""
    return layered(role_defaults, {}, {}, {}, specs, PLAIN)


def host_variables(play: Play, host: Host, extra_vars: Mapping[str, Any]) -> dict[str, Any]:
    """What `play`'s tasks on `host` see of the variables, before facts and registered results."""
    return layered(play.role_defaults, play.vars, host.vars, extra_vars, play.specs, PLAIN)


def inventory_variables(inventory: Inventory) -> dict[str, Any]:
    """Ansible's magic `groups` (group -> host names, `all` included) and `hostvars` (host -> its
    inventory vars and `address`), so a role can find another host, e.g. the office cache."""
    groups: dict[str, list[str]] = {"all": [host.name for host in inventory.hosts]}
    for name in inventory.group_names:
        groups[name] = [host.name for host in inventory.hosts if name in host.groups]
    hostvars = {host.name: {**host.vars, "address": host.address, "inventory_hostname": host.name}
                for host in inventory.hosts}
    return {"groups": groups, "hostvars": hostvars}


@dataclass(frozen=True)
class RoleDefaults:
    """Every role default of a roles folder, with the file:line it is written at."""

    values: dict[str, Value]

    @classmethod
    def read(cls, roles_dir: Path) -> RoleDefaults:
        values: dict[str, Value] = {}
        for role_dir in sorted(p for p in roles_dir.iterdir() if p.is_dir()) if roles_dir.is_dir() else []:
            path = role_dir / "defaults.yaml"
            if path.is_file():
                doc = load_yaml_file(path)
                for key, value in (doc.data or {}).items():
                    values[str(key)] = Value(value, path, doc.line((key,)), f"{ROLE_DEFAULT} ({role_dir.name})")
        return cls(values)


def play_values(plays: Iterable[Play]) -> dict[str, Value]:
    """The `vars:` of `plays` (those a host is in, in playbook order; a later play's value wins), each
    at the playbook line it is written on."""
    values: dict[str, Value] = {}
    for play in plays:
        for name, value in play.vars.items():
            values[name] = Value(value, play.source.file, play.var_lines.get(name, play.source.line),
                                 f"{PLAY_VARS} ({play.name})")
    return values


def effective(host: Host, inventory: Inventory, defaults: RoleDefaults, extra_vars: Mapping[str, Any],
              specs: Specs, plays: Iterable[Play] = ()) -> dict[str, Value]:
    """Every variable the host's tasks see, each with its origin (`plays`: those whose `vars:` count)."""
    origins = inventory.origins.get(host.name, {})
    inventory_values = {}
    for name, value in host.vars.items():
        origin = origins.get(name)
        inventory_values[name] = Value(value, origin.file if origin else inventory.path,
                                       origin.line if origin else None, INVENTORY)
    extra = {name: Value(value, None, None, EXTRA_VARS) for name, value in extra_vars.items()}
    return layered(defaults.values, play_values(plays), inventory_values, extra, specs, PLACED)

"""Where each of a host's effective variables came from: role default file:line, inventory, or `-e`.

One function, `effective`, merges the layers in the runner's order (role defaults < inventory group
vars < host vars < `-e`; see provision/inventory/vars.py) and keeps the origin of every value, so the
validator and `provision vars` name the same place.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from provision.inventory.model import Host, Inventory
from provision.inventory.yaml_loader import load_yaml_file
from provision.settings import profiles
from provision.settings.spec import Specs

EXTRA_VARS = "-e"


@dataclass(frozen=True)
class Value:
    """One effective variable: its value and where it was set (file None for `-e`)."""

    value: Any
    file: Path | None
    line: int | None
    layer: str  # "role default", "inventory", "-e"

    @property
    def where(self) -> str:
        if self.file is None:
            return EXTRA_VARS
        return f"{self.file}:{self.line}" if self.line else str(self.file)


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
                    values[str(key)] = Value(value, path, doc.line((key,)), f"role default ({role_dir.name})")
        return cls(values)


def effective(host: Host, inventory: Inventory, defaults: RoleDefaults, extra_vars: dict[str, Any],
              specs: Specs) -> dict[str, Value]:
    """Every variable the host's tasks see, each with its origin: role defaults < the selected
    profiles (provision/settings/profiles.py) < inventory < `-e`."""
    merged = dict(defaults.values)
    for name, value in host.vars.items():
        origin = inventory.origins.get(host.name, {}).get(name)
        merged[name] = Value(value, origin.file if origin else inventory.path, origin.line if origin else None,
                             "inventory")
    for name, value in extra_vars.items():
        merged[name] = Value(value, None, None, EXTRA_VARS)
    for option in specs.profile_options:
        chosen = merged.get(option.name)
        if chosen is None:
            continue
        for name, item in profiles.selected(option, chosen.value, (chosen.file, chosen.line)).items():
            if name not in merged or merged[name].layer.startswith("role default"):
                merged[name] = Value(item.value, item.file, item.line, f"{option.name} profile ({chosen.value})")
    return merged

"""The office cache host's state: services, bytes served vs fetched upstream, free disk.

`status_script()` runs on the cache host (one round trip); `parse_cache_status` turns its key=value
lines into a `CacheStatus`. A hit rate is by bytes: 1 - fetched upstream / served to clients (apt),
cache hits / all cached-path bytes (the hub mirror, from nginx's $upstream_cache_status).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

UNITS = ("apt-cacher-ng", "docker-registry", "provision-seed-registry", "nginx")


def status_script() -> str:
    return (Path(__file__).with_name("status.sh")).read_text()


@dataclass
class CacheStatus:
    units: dict[str, str] = field(default_factory=dict)
    apt_upstream_bytes: int = 0
    apt_served_bytes: int = 0
    hub_hit_bytes: int = 0
    hub_miss_bytes: int = 0
    disk_free_kib: int | None = None
    disk_used_kib: int | None = None
    hub_max_size: str = ""  # nginx's max_size of the hub cache as its config writes it (e.g. 200g)

    @property
    def apt_hit_rate(self) -> float | None:
        if not self.apt_served_bytes:
            return None
        return max(0.0, 1 - self.apt_upstream_bytes / self.apt_served_bytes)

    @property
    def hub_hit_rate(self) -> float | None:
        total = self.hub_hit_bytes + self.hub_miss_bytes
        return self.hub_hit_bytes / total if total else None

    @property
    def healthy(self) -> bool:
        return all(self.units.get(unit) == "active" for unit in UNITS)


def parse_cache_status(stdout: str) -> CacheStatus:
    """The CacheStatus of the script's output; missing lines leave their defaults."""
    values = dict(line.split("=", 1) for line in stdout.splitlines() if "=" in line)
    def number(key: str) -> int:
        text = values.get(key, "").strip()
        return int(text) if text.isdigit() else 0
    free, used = (values.get(f"disk.{key}_kib", "").strip() for key in ("free", "used"))
    return CacheStatus(
        units={unit: values.get(f"unit.{unit}", "").strip() or "unknown" for unit in UNITS},
        apt_upstream_bytes=number("apt.upstream_bytes"), apt_served_bytes=number("apt.served_bytes"),
        hub_hit_bytes=number("hub.hit_bytes"), hub_miss_bytes=number("hub.miss_bytes"),
        disk_free_kib=int(free) if free.isdigit() else None, disk_used_kib=int(used) if used.isdigit() else None,
        hub_max_size=values.get("hub.max_size", "").strip(),
    )

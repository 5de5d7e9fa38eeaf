"""`provision up INVENTORY --bundle DIR|host:PATH`: the bundle checked against every selected host
before anything changes, then handed to the roles as the variable `offline_bundle`.

`--bundle DIR` is a bundle on this machine: roles/offline_bundle copies each host the files it needs
(`bundle_host_dir`). `--bundle host:PATH` is a bundle already on every host (a USB disk mounted at
PATH): nothing is copied. Either way each host is read (its facts and, for host:PATH, the manifest
on it), what it needs is worked out from the tasks this run selects, and a bundle that lacks any of it
is refused with exit 2, every gap named with its host: nothing on any host has changed by then.

When the inventory has an office cache, the bundle seeds it (provision/bundle/seed.py): the cache host
gets every file of the bundle, the other hosts none (`via_cache`: they read the bundle's apt repository
from the cache's web server and take the image and the weights through the cache), and each is still
checked against the bundle. A seed is copied from this machine, so it takes `--bundle DIR`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from provision.bundle import manifest as manifests
from provision.bundle.manifest import KEY_FILE, Manifest
from provision.bundle.needs import HostNeeds, host_needs
from provision.bundle.seed import cache_host, seed_images
from provision.connection.base import Connection
from provision.errors import InputError
from provision.facts.gather import gather_facts
from provision.inventory.model import Host, Inventory
from provision.playbook.model import Play
from provision.playbook.unsafe import mark_unsafe
from provision.runner.host_run import RunOptions
from provision.runner.results import Reading
from provision.shell import quote

HOST_PREFIX = "host:"


@dataclass(frozen=True)
class BundleSource:
    """Where a bundle is: `local` on this machine, else `host_path` on every host."""

    local: Path | None
    host_path: str | None

    @classmethod
    def parse(cls, text: str) -> BundleSource:
        if text.startswith(HOST_PREFIX):
            path = text[len(HOST_PREFIX):]
            if not path.startswith("/"):
                raise InputError(f"{text!r}: the path on the host must be absolute (host:/media/usb/bundle)",
                                 key="--bundle")
            return cls(None, path.rstrip("/") or "/")
        return cls(Path(text).absolute(), None)


@dataclass
class HostView:
    needs: HostNeeds
    manifest: Manifest
    key: str


def read_host(source: BundleSource, local: tuple[Manifest, str] | None, conn: Connection, plays: list[Play],
              inventory: Inventory, host: Host, extra_vars: dict[str, Any], options: RunOptions) -> HostView:
    """The host's facts (and the manifest and key on it, for host:PATH), then what it needs."""
    facts = gather_facts(conn).as_vars()
    if local is not None:
        found, key = local
    else:
        assert source.host_path is not None
        where = f"{host.name}:{source.host_path}"
        read = conn.run(f"cat -- {quote(source.host_path + '/' + manifests.MANIFEST)}", sudo=True)
        if read.rc != 0:
            raise InputError(f"host {host.name}: no bundle at {source.host_path} ({read.stderr.strip()[-200:]}): "
                             "is the disk mounted there, and did its build finish?", key="--bundle")
        found = Manifest.from_json(read.stdout, f"{where}/{manifests.MANIFEST}")
        key_read = conn.run(f"cat -- {quote(source.host_path + '/' + KEY_FILE)} 2>/dev/null || true")
        key = key_read.stdout
    return HostView(host_needs(plays, inventory, host, facts, extra_vars, options), found, key)


ReadEach = Callable[[list[Host], Callable[[Host, Connection], HostView]], dict[str, Reading[HostView]]]


def offline_bundle_variable(bundle: str, read_each: ReadEach, inventory: Inventory, hosts: list[Host],
                            plays: list[Play], extra_vars: dict[str, Any], options: RunOptions) -> dict[str, Any]:
    """Check the bundle `--bundle` names against every host, read through the runner's read-only tasks
    (`read_each`), and return `offline_bundle` (InputError naming each gap)."""
    source = BundleSource.parse(bundle)
    local = None
    if source.local is not None:
        local = (manifests.load(source.local), (source.local / KEY_FILE).read_text()
                 if (source.local / KEY_FILE).is_file() else "")

    def view(reading: Reading[HostView]) -> HostView | str:
        if isinstance(reading.exception, InputError):
            return reading.exception.message
        if reading.value is None:
            return f"host {reading.host}: cannot be checked against the bundle: {reading.exception}"
        return reading.value

    readings = read_each(hosts, lambda host, conn: read_host(source, local, conn, plays, inventory, host, extra_vars,
                                                              options))
    views = {name: view(reading) for name, reading in readings.items()}
    problems = [v for v in views.values() if isinstance(v, str)]
    seed = cache_host(inventory, plays, extra_vars)
    if seed and source.local is None:
        problems.append(f"the office cache {seed} is seeded from a bundle on this machine: give --bundle DIR, "
                        f"not {bundle}")
    per_host: dict[str, Any] = {}
    key = ""
    for name, seen in views.items():
        if isinstance(seen, str):
            continue
        problems += [f"host {name} needs {gap}" for gap in seen.manifest.missing(seen.needs)]
        problems += [f"host {name}: packages of {task} are not known before the run; the bundle may lack them"
                     for task in seen.needs.unresolved]
        files = seen.manifest.files_for(seen.needs)
        per_host[name] = {
            "files": [{"path": path, **seen.manifest.files[path]} for path in files],
            "release": seen.needs.release,
            "images": [{"reference": ref, "file": seen.manifest.images[ref]["file"],
                        "id": seen.manifest.images[ref]["id"]} for ref in seen.needs.images
                       if ref in seen.manifest.images],
            "packages": bool(seen.needs.packages),
            # URL -> its copy, relative to the bundle (the roles' `from_bundle` filter reads it)
            "urls": {url: seen.manifest.urls[url]["file"] for url in seen.needs.urls if url in seen.manifest.urls},
        }
        if seed and name == seed:
            every = sorted(seen.manifest.files.items())
            per_host[name].update(files=[{"path": path, **entry} for path, entry in every],
                                  seed_images=seed_images(seen.manifest))
        elif seed:
            per_host[name].update(files=[], images=[], via_cache=True)
        key = key or seen.key
    if problems:
        where = bundle
        raise InputError(f"the bundle {where} cannot provision these hosts (nothing was changed):\n  "
                         + "\n  ".join(problems), key="--bundle")
    # read from the bundle (a manifest on a USB disk, a file list from the hub): data, never a template
    return mark_unsafe({"source": str(source.local) if source.local else "", "path": source.host_path or "",
                        "key": key, "hosts": per_host})

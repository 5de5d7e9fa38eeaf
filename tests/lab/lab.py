"""A lab: fresh hosts, a registry and the supervisor, all under one directory.

Two labs (a test run's and a developer's) can run side by side: container names carry an id made
from the lab directory (`plab-<id>-lab1`), labels tie containers to their lab, and ports are picked
free (SSH from 2201 upward, extra forwards from 28000 upward).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import docker.errors

from tests.lab import daemon, mirror, net
from tests.lab.host import LABEL_LAB, SSH_PORT, Bind, LabHost, docker_client
from tests.lab.image import Log, ensure_image
from tests.lab.inventory import render_inventory, render_known_hosts
from tests.lab.registry import Registry

FIRST_SSH_PORT = 2201
FIRST_EXTRA_PORT = 28000
REPO_ROOT = Path(__file__).resolve().parents[2]
TOOLS = ("slirp4netns", "nsenter", "iptables-restore", "ip6tables-restore", "docker-registry",
         "ssh-keygen", "zstd", "debootstrap")


def unavailable_reason() -> str | None:
    """Why the lab cannot run on this machine (root, tools, dockerd), or None if it can."""
    if os.geteuid() != 0:
        return "the lab needs root (slirp4netns and nsenter join containers' network namespaces)"
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:
        return f"missing {', '.join(missing)}: run tests/lab/install-host-packages.sh"
    try:
        docker_client().ping()
    except docker.errors.DockerException as error:
        return f"docker is not usable ({error}): run tests/lab/install-host-packages.sh"
    return None


class Lab:
    """The lab whose state lives in `dir` (created if missing)."""

    def __init__(self, dir: Path | str, log: Log = print) -> None:
        self.dir = Path(dir).absolute()
        self.id = hashlib.sha256(str(self.dir).encode()).hexdigest()[:6]
        self.registry = Registry(self.dir / "registry")
        self.log = log
        self._reserving = threading.Lock()
        self._allowed: list[str] | None = None
        self._unlucky_ports: set[int] = set()

    @property
    def key_file(self) -> Path:
        """The lab's SSH client key (ed25519); its public half is in every host's authorized_keys."""
        return self.dir / "id_ed25519"

    def start(self) -> None:
        """Make the key, the image, the registry and the supervisor exist (no hosts)."""
        (self.dir / "hosts").mkdir(parents=True, exist_ok=True)
        if not self.key_file.exists():
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"provision-lab-{self.id}",
                            "-f", str(self.key_file)], check=True)
        ensure_image(docker_client(), self.log)
        self.registry.start()
        if daemon.running(self.dir / "supervisor.pid", "tests.lab.supervisor") is None:
            daemon.spawn([sys.executable, "-m", "tests.lab.supervisor", str(self.dir)],
                         self.dir / "supervisor.pid", self.dir / "supervisor.log", cwd=REPO_ROOT)

    def up(self, n: int, prefix: str = "lab", **options: Any) -> list[LabHost]:
        """Start the lab and `n` fresh hosts named `<prefix><i>`; see `new_host` for `options`."""
        self.start()
        return self.new_hosts(n, prefix, **options)

    def new_hosts(self, n: int, prefix: str = "lab", **options: Any) -> list[LabHost]:
        """`n` fresh hosts, started in parallel (the lab must be started)."""
        return self.new_host_set(*[{"prefix": prefix, **options}] * n)

    def new_host_set(self, *hosts: dict[str, Any]) -> list[LabHost]:
        """Fresh hosts of different kinds (a gateway and its backends), one dict of `new_host` options
        each, started in parallel: one after the other, each boot waited on its own (5-8 s on 2 cores)."""
        with ThreadPoolExecutor(max_workers=max(1, min(len(hosts), 4))) as pool:
            return list(pool.map(lambda options: self.new_host(**options), hosts))

    def new_host(self, name: str | None = None, *, prefix: str = "lab", binds: Sequence[Bind] = (),
                 extra_ports: Sequence[int] = (), offline: bool = False, suite: str = "bookworm") -> LabHost:
        """A fresh host, reachable over SSH when this returns.

        `binds` mount this machine's files into the host (e.g. a simulated device's sysfs folder);
        `extra_ports` are guest ports to forward from 127.0.0.1 too (`host.port(guest)` says where);
        `offline`: its egress filter lets out nothing but its SSH server's replies (no archive, no
        registry, no hub, no DNS); `suite` is the Debian release it runs (bookworm, or trixie: its
        image is made on first use).
        """
        image = ensure_image(docker_client(), self.log, suite)
        for attempt in (1, 2):
            host = self._reserve(name, prefix, list(binds), list(extra_ports), image, offline)
            host.create(self.dir, self.key_file.with_suffix(".pub").read_text())
            try:
                host.wait_for_ssh()
            except TimeoutError as error:
                # seen rarely on a loaded 2-core machine: the port forward never answers. Say what
                # was seen, then start the host again, fresh, on other ports (once).
                self.log(f"{error}; {host.diagnose()}")
                self._unlucky_ports.update(host.ports.values())
                host.remove()
                if attempt == 2:
                    raise
                continue
            self.log(f"{host.name}: ssh on 127.0.0.1:{host.ssh_port}")
            return host
        raise AssertionError("unreachable")

    def hosts(self) -> list[LabHost]:
        """Every host of this lab, as recorded on disk."""
        return [LabHost.load(d) for d in sorted((self.dir / "hosts").glob("*")) if (d / "host.json").is_file()]

    def remove_hosts_except(self, kept: set[str]) -> None:
        """Remove every host of this lab whose name is not in `kept` (in parallel)."""
        with ThreadPoolExecutor(max_workers=4) as pool:
            list(pool.map(LabHost.remove, [host for host in self.hosts() if host.name not in kept]))

    def down(self) -> None:
        """Stop the supervisor, remove every host (and any container left labelled with this lab),
        stop the registry."""
        daemon.stop(self.dir / "supervisor.pid", "tests.lab.supervisor")
        self.remove_hosts_except(set())
        for leftover in docker_client().containers.list(all=True, filters={"label": f"{LABEL_LAB}={self.dir}"}):
            leftover.remove(force=True)
        shutil.rmtree(self.dir / "hosts", ignore_errors=True)
        self.registry.stop()

    def write_known_hosts(self, path: Path, hosts: Iterable[LabHost]) -> Path:
        """Write `path` with each host's own ed25519 key, for strict host-key checking."""
        path.write_text(render_known_hosts((host.ssh_port, host.host_key()) for host in hosts))
        return path

    def write_inventory(self, path: Path, hosts: Sequence[LabHost], user: str = "root", **vars: Any) -> Path:
        """Write the fleet inventory the tool reads; `vars` go under all.vars. Unless `vars` names
        its own `known_hosts`, a `known_hosts` file beside `path` is written and named."""
        if "known_hosts" not in vars:
            vars["known_hosts"] = str(self.write_known_hosts(path.with_name("known_hosts"), hosts).absolute())
        variables = {"ansible_user": user, "ansible_ssh_private_key_file": str(self.key_file), **vars}
        path.write_text(render_inventory(((h.name, h.ssh_port) for h in hosts), variables))
        return path

    def _reserve(self, name: str | None, prefix: str, binds: list[Bind], extra_ports: list[int],
                 image: str, offline: bool = False) -> LabHost:
        """Pick a name and free ports and record them on disk, so parallel starts never share one."""
        with self._reserving:
            hosts_dir = self.dir / "hosts"
            if name is None:
                name = next(f"{prefix}{i}" for i in range(1, 10_000) if not (hosts_dir / f"{prefix}{i}").exists())
            if not re.fullmatch(r"[a-z][a-z0-9-]*", name):
                raise ValueError(f"lab host name {name!r}: use lower-case letters, digits and '-'")
            (hosts_dir / name).mkdir(parents=True)
            taken = {port for host in self.hosts() for port in host.ports.values()} | self._unlucky_ports
            ports = {SSH_PORT: net.free_port(FIRST_SSH_PORT, taken)}
            for guest_port in extra_ports:
                ports[guest_port] = net.free_port(FIRST_EXTRA_PORT, taken | set(ports.values()))
            host = LabHost(name=name, container_name=f"plab-{self.id}-{name}", dir=hosts_dir / name,
                           ports=ports, allowed=[] if offline else self._archive_addresses(), binds=binds,
                           ssh_only=offline, image=image)
            host.save()
            return host

    def _archive_addresses(self) -> list[str]:
        if self._allowed is None:
            self._allowed = mirror.archive_addresses(mirror.debian_sources(mirror.machine_sources()))
        return self._allowed

"""The lab's image registry: Debian's `docker-registry` on 127.0.0.1, data under the lab directory.

Test images are built on this machine and pushed here; lab hosts pull them as 10.0.2.2:PORT/...
(their daemon.json must list that address in `insecure-registries`).
"""

from __future__ import annotations

import time
import urllib.request
from pathlib import Path

import yaml

from tests.lab import daemon, net
from tests.lab.host import docker_client

DEFAULT_PORT = 5000


class Registry:
    """The registry of one lab; its config, data, log, pid and port live in `dir`."""

    def __init__(self, dir: Path) -> None:
        self.dir = dir

    @property
    def port(self) -> int:
        return int((self.dir / "port").read_text())

    @property
    def address_for_hosts(self) -> str:
        """The registry as lab hosts reach it, e.g. `10.0.2.2:5000`."""
        return f"{net.MACHINE_FROM_HOSTS}:{self.port}"

    def running(self) -> bool:
        return daemon.running(self.dir / "registry.pid", "docker-registry") is not None

    def start(self) -> None:
        """Serve on 127.0.0.1:5000, or on the next free port if that one is taken."""
        if self.running():
            return
        self.dir.mkdir(parents=True, exist_ok=True)
        port = net.free_port(DEFAULT_PORT, set())
        config = {
            "version": 0.1,
            "log": {"level": "warn"},
            "storage": {"filesystem": {"rootdirectory": str(self.dir / "data")}},
            "http": {"addr": f"127.0.0.1:{port}", "secret": "provision-lab"},
        }
        (self.dir / "config.yml").write_text(yaml.safe_dump(config))
        (self.dir / "port").write_text(f"{port}\n")
        registry = daemon.spawn(["docker-registry", "serve", str(self.dir / "config.yml")],
                     self.dir / "registry.pid", self.dir / "registry.log")
        deadline = time.monotonic() + 10
        while not self._answers():
            if time.monotonic() > deadline or registry.poll() is not None:
                raise RuntimeError(f"registry did not start: {(self.dir / 'registry.log').read_text()[-500:]}")
            time.sleep(0.05)

    def stop(self) -> None:
        daemon.stop(self.dir / "registry.pid", "docker-registry")

    def push(self, local_image: str, name: str) -> str:
        """Push `local_image` (on this machine's docker) as `name` (`repo:tag`); return the
        reference lab hosts pull, e.g. `10.0.2.2:5000/repo:tag`."""
        repo, _, tag = name.partition(":")
        target = f"127.0.0.1:{self.port}/{repo}"
        client = docker_client()
        client.images.get(local_image).tag(target, tag or "latest")
        for line in client.images.push(target, tag=tag or "latest", stream=True, decode=True):
            if "error" in line:
                raise RuntimeError(f"push of {local_image} as {target}:{tag} failed: {line['error']}")
        return f"{self.address_for_hosts}/{repo}:{tag or 'latest'}"

    def _answers(self) -> bool:
        try:
            no_proxy = urllib.request.build_opener(urllib.request.ProxyHandler({}))
            with no_proxy.open(f"http://127.0.0.1:{self.port}/v2/", timeout=1) as reply:
                return reply.status == 200
        except OSError:
            return False

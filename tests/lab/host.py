"""One lab host: a container booting systemd, reachable over SSH on a 127.0.0.1 port.

Its state lives in its own directory (`host.json`, slirp4netns' files, the folders bind-mounted at
/var/lib/docker and /var/lib/containerd, and a `stopped` marker while the lab has stopped it), so
the supervisor process can bring it back after a reboot from what is on disk.
"""

from __future__ import annotations

import fcntl
import functools
import io
import json
import os
import shutil
import socket
import tarfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import NamedTuple

import docker
import docker.errors
from docker.models.containers import Container
from docker.types import Mount

from tests.lab import net
from tests.lab.image import DEPLOY_UID, IMAGE

LABEL_LAB = "provision-lab.dir"
REBOOT_EXIT_CODE = 129  # systemd as a container's PID 1 exits so on reboot (poweroff/halt: 130)
SSH_PORT = 22


@functools.cache
def docker_client() -> docker.DockerClient:
    """One docker client per process (it is safe to share between threads)."""
    return docker.from_env()


class Bind(NamedTuple):
    """A folder or file of this machine mounted into a lab host (paths may contain ':')."""

    source: str
    target: str
    read_only: bool = False


@dataclass
class LabHost:
    """A lab host. `ports` maps guest ports (22 and any extra) to their 127.0.0.1 ports."""

    name: str
    container_name: str
    dir: Path
    ports: dict[int, int]
    allowed: list[str] = field(default_factory=list)  # addresses the egress filter lets through
    binds: list[Bind] = field(default_factory=list)
    ssh_only: bool = False  # the egress filter lets out only the SSH server's replies (a site with no internet)
    image: str = IMAGE  # the Debian release it runs (tests.lab.image.image_name)

    @property
    def ssh_port(self) -> int:
        return self.ports[SSH_PORT]

    @property
    def container(self) -> Container:
        return docker_client().containers.get(self.container_name)

    def port(self, guest_port: int) -> int:
        """The 127.0.0.1 port that reaches `guest_port` of this host."""
        return self.ports[guest_port]

    @classmethod
    def load(cls, host_dir: Path) -> LabHost:
        """The host whose state is in `host_dir`."""
        state = json.loads((host_dir / "host.json").read_text())
        state["ports"] = {int(guest): local for guest, local in state["ports"].items()}
        state["binds"] = [Bind(*bind) for bind in state["binds"]]
        return cls(dir=host_dir, **state)

    def save(self) -> None:
        """Write host.json atomically: other threads list the lab's hosts while hosts start."""
        state = asdict(self)
        del state["dir"]
        partial = self.dir / "host.json.part"
        partial.write_text(json.dumps(state, indent=2) + "\n")
        os.replace(partial, self.dir / "host.json")

    def create(self, lab_dir: Path, public_key: str) -> None:
        """Start this host fresh (its disk is new), with networking; does not wait for SSH."""
        self.dir.mkdir(parents=True, exist_ok=True)
        self.save()
        for folder in ("var-lib-docker", "var-lib-containerd"):
            (self.dir / folder).mkdir(exist_ok=True)
        api = docker_client().api
        host_config = api.create_host_config(
            cap_add=["ALL"], cap_drop=["SYS_RESOURCE"],  # --privileged fails: no CAP_SYS_RESOURCE here
            security_opt=["seccomp=unconfined", "apparmor=unconfined"],
            device_cgroup_rules=["a *:* rwm"], cgroupns="host", network_mode="none",
            tmpfs={"/run": "", "/run/lock": "", "/tmp": ""},
            binds=["/sys/fs/cgroup:/sys/fs/cgroup:rw",
                   # docker inside gets overlay2 on a real folder (on the container's overlay: vfs)
                   f"{self.dir}/var-lib-docker:/var/lib/docker",
                   f"{self.dir}/var-lib-containerd:/var/lib/containerd"],
            mounts=[Mount(b.target, b.source, type="bind", read_only=b.read_only) for b in self.binds],
        )
        host_config["MaskedPaths"] = host_config["ReadonlyPaths"] = []  # systempaths=unconfined
        created = api.create_container(
            self.image, name=self.container_name, hostname=self.name, host_config=host_config,
            stop_signal="SIGRTMIN+3", labels={LABEL_LAB: str(lab_dir), "provision-lab.host": self.name},
        )
        api.put_archive(created["Id"], "/", _authorized_keys_tar(public_key))
        api.start(created["Id"])
        self._attach_network()

    def wait_for_ssh(self, timeout: float = 60) -> None:
        """Return once sshd answers with its banner on the host's SSH port."""
        deadline = time.monotonic() + timeout
        while not _ssh_banner(self.ssh_port):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.name}: no SSH on 127.0.0.1:{self.ssh_port} after {timeout} s")
            time.sleep(0.1)

    def diagnose(self) -> str:
        """One line on why a host may not answer: its container's state and slirp4netns' last words."""
        try:
            state = self.container.attrs["State"]["Status"]
        except docker.errors.DockerException as error:
            state = f"unknown ({error})"
        slirp_log = self.dir / "slirp.log"
        tail = slirp_log.read_text(errors="replace").strip().splitlines()[-3:] if slirp_log.exists() else []
        return f"container {state}; slirp4netns: {' | '.join(tail) or 'no log'}"

    def exec(self, command: str, user: str = "root") -> tuple[int, str]:
        """Run `command` with bash inside the host (not over SSH); its exit code and output."""
        rc, output = self.container.exec_run(["bash", "-c", command], user=user)
        return rc, output.decode(errors="replace")

    def host_key(self) -> str:
        """The host's ed25519 public key, `ssh-ed25519 AAAA...`, as known_hosts wants it."""
        rc, output = self.exec("cat /etc/ssh/ssh_host_ed25519_key.pub")
        if rc != 0:
            raise RuntimeError(f"{self.name}: no ed25519 host key yet: {output}")
        return " ".join(output.split()[:2])

    def dropped_packets(self) -> int:
        """How many packets the egress filter has dropped since this boot."""
        return net.dropped_packets(self.container.attrs["State"]["Pid"])

    def reboot_restart(self, wait: bool = True) -> None:
        """Bring the host back after a reboot inside (or after `stop`): start the container if it is
        not running and give its new network namespace networking. The supervisor calls this."""
        with self._lock():
            (self.dir / "stopped").unlink(missing_ok=True)
            container = self.container
            if container.status != "running":
                container.start()
            self._attach_network()
        if wait:
            self.wait_for_ssh()

    def stop(self, timeout: int = 10) -> None:
        """Stop the host like a power-off; `timeout=0` is a power cut: docker sends the container's
        PID 1 SIGTERM and SIGKILL at once (docker stop -t 0), so no service gets to shut down. The
        supervisor leaves it stopped. Its disk is kept."""
        with self._lock():
            (self.dir / "stopped").touch()
            with suppress(docker.errors.NotFound):
                self.container.stop(timeout=timeout)
            net.detach(self.dir)

    def remove(self) -> None:
        """Remove the host (killed, not shut down), its networking and its directory."""
        with self._lock():
            (self.dir / "stopped").touch()
            with suppress(docker.errors.NotFound):
                self.container.remove(force=True)
            net.detach(self.dir)
        shutil.rmtree(self.dir)  # the inner dockerd's files are root's; the lab runs as root

    def stay_down_after_reboot(self) -> None:
        """The next reboot inside does not come back (a machine stuck at a boot prompt): the
        supervisor leaves the host stopped until `reboot_restart()`."""
        (self.dir / "stopped").touch()

    def stopped_by_lab(self) -> bool:
        return (self.dir / "stopped").exists()

    def _attach_network(self) -> None:
        netns_pid = self.container.attrs["State"]["Pid"]
        if not net.attached(self.dir, netns_pid):
            net.attach(netns_pid, self.dir, self.ports, self.allowed, ssh_only=self.ssh_only)

    @contextmanager
    def _lock(self) -> Iterator[None]:
        """Serialise restarts between the supervisor and a test calling reboot_restart itself."""
        with open(self.dir / "lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield


def _authorized_keys_tar(public_key: str) -> bytes:
    """A tar of root's and deploy's authorized_keys holding the lab's client key."""
    buffer = io.BytesIO()
    data = (public_key.strip() + "\n").encode()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for path, uid in (("root/.ssh/authorized_keys", 0), ("home/deploy/.ssh/authorized_keys", DEPLOY_UID)):
            info = tarfile.TarInfo(path)
            info.size, info.mode, info.uid, info.gid = len(data), 0o600, uid, uid
            info.mtime = int(time.time())
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def _ssh_banner(port: int) -> bool:
    """Whether an SSH server answers on 127.0.0.1:`port` (slirp accepts even when sshd does not)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as conn:
            return conn.recv(4).startswith(b"SSH-")
    except OSError:
        return False

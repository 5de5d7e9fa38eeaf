"""The lab gives what the tool's tests rely on: real hosts with their own identity, working apt,
no way out but the Debian archive, and reboots that come back by themselves."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import paramiko
import pytest
import yaml

from tests.lab import Lab, LabHost

pytestmark = pytest.mark.lab


@pytest.fixture(scope="module")
def two_hosts(lab: Lab) -> list[LabHost]:
    return lab.new_hosts(2)


@pytest.fixture(scope="module")
def inventory(lab: Lab, two_hosts: list[LabHost], tmp_path_factory: pytest.TempPathFactory) -> Path:
    return lab.write_inventory(tmp_path_factory.mktemp("fleet") / "inventory.yaml", two_hosts)


@pytest.fixture(scope="module")
def connect(lab: Lab, inventory: Path) -> Callable[..., paramiko.SSHClient]:
    """Connect as the tool would: the lab key, and only host keys found in the written known_hosts."""
    known_hosts = yaml.safe_load(inventory.read_text())["all"]["vars"]["known_hosts"]

    def open_client(host: LabHost, user: str = "root") -> paramiko.SSHClient:
        client = paramiko.SSHClient()
        client.load_host_keys(known_hosts)
        client.set_missing_host_key_policy(paramiko.RejectPolicy())
        client.connect("127.0.0.1", port=host.ssh_port, username=user, key_filename=str(lab.key_file),
                       look_for_keys=False, allow_agent=False, timeout=10)
        return client
    return open_client


def run(client: paramiko.SSHClient, command: str) -> tuple[int, str]:
    _, stdout, stderr = client.exec_command(command, timeout=120)
    output = stdout.read().decode() + stderr.read().decode()
    return stdout.channel.recv_exit_status(), output


def test_inventory_lists_each_host_with_the_lab_key(lab: Lab, two_hosts: list[LabHost], inventory: Path) -> None:
    fleet = yaml.safe_load(inventory.read_text())["all"]
    assert fleet["vars"]["ansible_user"] == "root"
    assert fleet["vars"]["ansible_ssh_private_key_file"] == str(lab.key_file)
    assert fleet["hosts"] == {h.name: {"ansible_host": "127.0.0.1", "ansible_port": h.ssh_port} for h in two_hosts}


def test_each_host_has_its_own_host_key_checked_against_known_hosts(
        two_hosts: list[LabHost], connect: Callable[..., paramiko.SSHClient]) -> None:
    assert two_hosts[0].host_key() != two_hosts[1].host_key()
    for host in two_hosts:
        with connect(host) as client:
            assert run(client, "hostname") == (0, f"{host.name}\n")


def test_deploy_user_has_passwordless_sudo(two_hosts: list[LabHost],
                                          connect: Callable[..., paramiko.SSHClient]) -> None:
    with connect(two_hosts[0], user="deploy") as client:
        assert run(client, "id -un") == (0, "deploy\n")
        assert run(client, "sudo -n id -u") == (0, "0\n")


def test_systemd_is_running_and_apt_reaches_the_archive(two_hosts: list[LabHost],
                                                       connect: Callable[..., paramiko.SSHClient]) -> None:
    with connect(two_hosts[0]) as client:
        assert run(client, "systemctl is-system-running --wait") == (0, "running\n")
        rc, output = run(client, "apt-get update")
        assert rc == 0, output
        assert "Err:" not in output


def test_egress_to_other_addresses_is_dropped_inside_the_host(two_hosts: list[LabHost],
                                                            connect: Callable[..., paramiko.SSHClient]) -> None:
    host = two_hosts[1]
    dropped_before = host.dropped_packets()
    with connect(host) as client:
        rc, output = run(client, "curl -sS -m 3 -o /dev/null http://1.1.1.1/")
    assert rc == 28, output  # a timeout: the SYN went nowhere (not refused, not answered)
    assert host.dropped_packets() > dropped_before


def test_reboot_brings_the_host_back_by_itself(two_hosts: list[LabHost],
                                               connect: Callable[..., paramiko.SSHClient]) -> None:
    host = two_hosts[0]
    started_before = host.container.attrs["State"]["StartedAt"]
    with connect(host) as client:
        assert run(client, "touch /run/before-reboot && ls /run/before-reboot")[0] == 0
        client.exec_command("systemctl reboot")
    deadline = time.monotonic() + 60
    while host.container.attrs["State"]["StartedAt"] == started_before:
        assert time.monotonic() < deadline, "the container was not started again after the reboot"
        time.sleep(0.2)
    host.wait_for_ssh()
    with connect(host) as client:  # same host key after the reboot: its disk was kept
        assert run(client, "systemctl is-system-running --wait") == (0, "running\n")
        assert run(client, "test -e /run/before-reboot")[0] == 1

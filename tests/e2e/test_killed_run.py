"""A run killed (SIGKILL) in the middle of installing packages is simply run again to completion."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from tests.e2e.helpers import REPO, provision

pytestmark = pytest.mark.lab


def test_run_killed_during_apt_then_rerun_converges(lab, tmp_path):
    (host,) = lab.new_hosts(1, prefix="kill")
    inventory = lab.write_inventory(tmp_path / "inventory.yaml", [host])
    argv = [sys.executable, "-m", "provision", "up", str(inventory), "--tags", "docker"]
    process = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               start_new_session=True)
    deadline = time.monotonic() + 300
    try:
        # kill it while dpkg is unpacking packages (some are half-way in dpkg's status database):
        # the worst moment for a package manager
        in_flight = "dpkg --audit | grep -q ."
        while time.monotonic() < deadline and process.poll() is None:
            if host.exec(in_flight)[0] == 0:
                break
            time.sleep(0.1)
        assert process.poll() is None, "the run ended before dpkg started: nothing was interrupted"
        os.killpg(process.pid, signal.SIGKILL)
        # without a terminal the remote side would carry on: kill it too, as a power cut would
        host.exec("pkill -KILL -x apt-get; pkill -KILL -x dpkg; true")
    finally:
        process.wait(timeout=30)
    assert host.exec("systemctl is-active docker")[1].strip() != "active", "killed too late to prove anything"
    assert host.exec("dpkg --audit")[1].strip() != "", "dpkg was not interrupted: nothing to recover from"

    rerun = provision("up", str(inventory), "--tags", "docker", json_path=tmp_path / "rerun.json")
    assert rerun.returncode == 0, rerun.output
    assert host.exec("systemctl is-active docker")[1].strip() == "active"
    assert host.exec("dpkg --audit")[1].strip() == "", "dpkg left half-configured packages"
    assert host.exec("test ! -e /usr/sbin/policy-rc.d")[0] == 0, "a temporary policy-rc.d was left behind"
    leftovers = host.exec("find /etc/docker /etc/apt -name '*.tmp*' -o -name '.provision*'")[1].strip()
    assert leftovers == "", f"half-written files left: {leftovers}"

    again = provision("up", str(inventory), "--tags", "docker", json_path=tmp_path / "again.json")
    assert again.returncode == 0 and again.host(host.name)["changed"] == 0, again.output

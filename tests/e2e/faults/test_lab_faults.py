"""Faults of the world on lab hosts: the dpkg lock really held by another process while apt must
install, and a reboot that never comes back. (A full disk and an SSH reset during the weights
download: test_kill_the_whole_site.py, on its converged laptop.)"""

from __future__ import annotations

import re
import time

from tests.e2e.helpers import provision
from tests.e2e.test_gpu_preflight import hold_dpkg_lock
from tests.standins.nvidia import HostTraits


def test_apt_waits_for_a_dpkg_lock_held_by_another_process_naming_it_then_goes_on(lab, tmp_path, figures):
    """The holder is an fcntl lock on /var/lib/dpkg/lock-frontend, as apt and unattended-upgrades
    take it (apt-pkg/contrib/fileutl.cc GetLock: fcntl F_SETLK). Before: apt-get waited silently."""
    (host,) = lab.new_hosts(1, prefix="dpkglock")
    inventory = lab.write_inventory(tmp_path / "inventory.yaml", [host])
    holder = hold_dpkg_lock(host, 15)
    started = time.monotonic()
    run = provision("up", str(inventory), "--tags", "docker", json_path=tmp_path / "run.json")
    waited = time.monotonic() - started
    shown = re.findall(rf"waiting for the dpkg lock held by process {holder} \(python3 -c import fcntl.*?\) "
                       r"for (\d+) s", run.output)
    clear = run.returncode == 0 and bool(shown) and waited >= 10
    figures.faults.append(clear)
    print(f"waited {waited:.0f} s; progress lines: {shown}")
    assert clear, run.output
    assert host.exec("systemctl is-active docker")[1].strip() == "active"


def test_a_reboot_that_never_comes_back_ends_within_its_bound_naming_the_host_and_what_to_do(
        gpu_host, gpu_inventory, tmp_path, figures):
    host = gpu_host(HostTraits(nouveau_at_boot=True), prefix="noboot")
    inventory = gpu_inventory(tmp_path / "inventory.yaml", [host], nvidia_reboot="auto", nvidia_reboot_timeout=30)
    host.stay_down_after_reboot()
    started = time.monotonic()
    run = provision("up", str(inventory), "--tags", "preflight,nvidia_driver", json_path=tmp_path / "run.json",
                    timeout=300)
    took = time.monotonic() - started
    error = run.host(host.name).get("error") or ""
    clear = (run.returncode != 0 and f"{host.name} did not come back from a new boot within" in error
             and "run `provision up` again" in error and "reboot for the NVIDIA driver" in run.output)
    figures.faults.append(clear)
    print(f"ended after {took:.0f} s: {error}")
    assert clear, run.output
    assert host.container.status != "running", "the host came back: nothing was proven"
    host.reboot_restart()  # someone answered the boot prompt
    rerun = provision("up", str(inventory), "--tags", "preflight,nvidia_driver", json_path=tmp_path / "rerun.json")
    assert rerun.returncode == 0, rerun.output
    again = provision("up", str(inventory), "--tags", "preflight,nvidia_driver", json_path=tmp_path / "again.json")
    assert again.returncode == 0 and again.host(host.name)["changed"] == 0, again.output

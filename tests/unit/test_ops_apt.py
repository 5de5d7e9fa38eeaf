"""`apt`: recorded dpkg-query / apt-mark / apt-cache outputs -> the one apt script a plan runs."""

from __future__ import annotations

import shutil

import pytest

from provision.connection.base import CommandResult
from provision.errors import TaskFailed
from provision.ops import REGISTRY
from provision.ops.apt import APT_GET, DPKG_LOCK_TIMEOUT_S, dpkg_lock_script
from provision.ops.apt_update import apt_update_script
from tests.unit.ops_support import (
    ScriptedConnection,
    assert_commands_parse,
    context,
    make_args,
    plan,
    probe_local,
)
from tests.unit.ops_support import script_of as full_script_of

LOCK_WAIT = f"{dpkg_lock_script()}\nwait_dpkg_lock {DPKG_LOCK_TIMEOUT_S}\n"


def script_of(result) -> str:
    """The apt script after its standard first step (the visible wait for the dpkg lock)."""
    script = full_script_of(result)
    assert script.startswith(LOCK_WAIT), "every apt script first waits for the dpkg lock, showing its holder"
    return script[len(LOCK_WAIT):]

NOW = 1_800_000_000
FRESH = f"now={NOW}\nlists_mtime={NOW - 600}\n"
STALE = f"now={NOW}\nlists_mtime={NOW - 86400}\n"
# recorded on Debian 12: curl installed, jq never installed, nvidia-open held
CURL = "pkg=curl\t7.88.1-10+deb12u14\tii \n"
HELD_DRIVER = "pkg=nvidia-open\t580.95.05-1\thi \n"


def test_installed_packages_are_converged_without_touching_the_cache() -> None:
    result = plan("apt", CURL + STALE, name=["curl"], update_cache=True)
    assert not result.changed and not result.steps and result.commands == []


def test_missing_package_installs_with_the_standard_options() -> None:
    result = plan("apt", CURL + FRESH, name=["curl", "jq"])
    assert result.changed
    script = script_of(result)
    assert script == f"{APT_GET} install 'jq'"
    for option in ("-o DPkg::Lock::Timeout=600", "-y", "-q", "--force-confdef", "--force-confold"):
        assert option in script
    assert result.summary == "install jq"
    assert_commands_parse(result)


def test_stale_cache_is_refreshed_as_part_of_an_install_only() -> None:
    result = plan("apt", CURL + STALE + "candidate=jq\t1.6-2.1\n", name=["jq"], update_cache=True)
    script = script_of(result)
    assert script.index(apt_update_script(APT_GET)) < script.index("install 'jq'")
    assert "touch -- /var/lib/apt/periodic/update-success-stamp" in script
    fresh = plan("apt", FRESH + "candidate=jq\t1.6-2.1\n", name=["jq"], update_cache=True)
    assert "update" not in script_of(fresh)


def test_fresh_cache_is_refreshed_when_a_package_has_no_candidate() -> None:
    # e.g. its repository was added since the last update
    result = plan("apt", FRESH, name=["nvidia-container-toolkit"], update_cache=True)
    assert apt_update_script(APT_GET) in script_of(result)


def test_cache_refresh_alone_is_not_a_change() -> None:
    result = plan("apt", STALE, update_cache=True)
    assert not result.changed and result.steps
    assert not plan("apt", FRESH, update_cache=True).steps


def test_pinned_version_is_installed_and_allowed_to_downgrade() -> None:
    result = plan("apt", CURL + FRESH, name={"curl": "7.88.1-10+deb12u5"})
    assert "--allow-downgrades 'curl=7.88.1-10+deb12u5'" in script_of(result)
    assert not plan("apt", CURL + FRESH, name=["curl=7.88.1-10+deb12u14"]).changed
    assert not plan("apt", CURL + FRESH, name=["curl=7.88.*"]).changed


def test_hold_counts_only_when_held() -> None:
    assert not plan("apt", HELD_DRIVER + FRESH, name=["nvidia-open"], hold=True).changed
    result = plan("apt", CURL + FRESH, name=["curl"], hold=True)
    assert result.changed and script_of(result) == "apt-mark hold 'curl'"


def test_changing_a_held_package_unholds_nothing_but_holds_again() -> None:
    result = plan("apt", HELD_DRIVER + FRESH, name=["nvidia-open=580.105.08-1"])
    script = script_of(result)
    assert "--allow-change-held-packages" in script
    assert script.index("install") < script.index("apt-mark hold 'nvidia-open'")


def test_unhold() -> None:
    result = plan("apt", HELD_DRIVER + FRESH, name=["nvidia-open"], hold=False)
    assert script_of(result) == "apt-mark unhold 'nvidia-open'"


def test_interrupted_dpkg_is_repaired_first() -> None:
    for state in ("dpkg_audit=1\n", "dpkg_updates=1\n", "pkg=jq\t1.6-2.1\tiU \n"):
        result = plan("apt", state + CURL + FRESH, name=["curl", "jq"])
        assert result.changed
        script = script_of(result)
        assert script.startswith("dpkg_configure() {")
        assert "dpkg --force-confdef --force-confold --configure -a" in script
        assert_commands_parse(result)


def test_start_services_false_uses_a_temporary_policy_rc_d() -> None:
    result = plan("apt", FRESH, name=["docker.io"], start_services=False)
    script = script_of(result)
    assert "exit 101" in script
    assert "trap 'rm -f -- /usr/sbin/policy-rc.d /usr/sbin/policy-rc.d.provision' EXIT" in script
    assert script.index("trap") < script.index("install 'docker.io'")
    assert_commands_parse(result)


def test_policy_rc_d_left_by_a_killed_run_is_removed() -> None:
    result = plan("apt", CURL + FRESH + "policy_rc=leftover\n", name=["curl"])
    assert result.changed and script_of(result) == "rm -f -- /usr/sbin/policy-rc.d"
    assert not plan("apt", CURL + FRESH + "policy_rc=foreign\n", name=["curl"]).changed


def test_absent_removes_installed_and_ignores_config_only() -> None:
    state = CURL + "pkg=snapd\t2.57\trc \n" + FRESH
    result = plan("apt", state, name=["curl", "snapd"], state="absent")
    assert script_of(result) == f"{APT_GET} remove 'curl'"
    purge = plan("apt", state, name=["curl", "snapd"], state="absent", purge=True)
    assert script_of(purge) == f"{APT_GET} purge 'curl' 'snapd'"


def test_no_recommends() -> None:
    result = plan("apt", FRESH, name=["dkms"], install_recommends=False)
    assert "install --no-install-recommends 'dkms'" in script_of(result)


def test_latest_with_a_known_newer_candidate_is_a_change() -> None:
    result = plan("apt", CURL + FRESH + "candidate=curl\t7.88.1-10+deb12u15\n", name=["curl"], state="latest")
    assert result.changed and "install 'curl'" in script_of(result)
    same = plan("apt", CURL + FRESH + "candidate=curl\t7.88.1-10+deb12u14\n", name=["curl"], state="latest")
    assert not same.changed and not same.steps


def test_latest_with_a_stale_cache_reports_a_change_only_if_a_version_moved() -> None:
    state = CURL + STALE + "candidate=curl\t7.88.1-10+deb12u14\n"
    result = plan("apt", state, name=["curl"], state="latest", update_cache=True)
    assert not result.changed and result.steps
    assert "provision_changed=1" in script_of(result)
    op = REGISTRY["apt"]
    moved = op.apply(context(ScriptedConnection([CommandResult("provision_changed=1\n", "", 0)])), result)
    same = op.apply(context(ScriptedConnection([CommandResult("", "", 0)])), result)
    assert moved.changed and not same.changed
    assert_commands_parse(result)


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="not a valid Debian package name"):
        make_args("apt", name=["curl; rm -rf /"])
    with pytest.raises(ValueError, match="only make sense with state: present"):
        make_args("apt", name=["curl=1"], state="latest")
    with pytest.raises(ValueError, match="contradicts"):
        make_args("apt", name=["curl"], state="absent", hold=True)


@pytest.mark.skipif(shutil.which("dpkg-query") is None, reason="needs a Debian-like machine")
def test_probe_reads_the_real_package_database() -> None:
    args = {"name": ["bash", "surely-not-a-package"], "update_cache": True}
    state = probe_local("apt", **args)
    assert "\npkg=bash\t" in "\n" + state and "now=" in state
    result = plan("apt", state, **args)
    assert result.summary == "refresh apt cache; install surely-not-a-package"


@pytest.mark.skipif(shutil.which("dpkg-query") is None, reason="needs a Debian-like machine")
def test_the_lists_age_is_read_only_where_the_plan_may_refresh_them() -> None:
    """A converged rerun (every package installed) skips the stat of every list; a missing one, a
    pinned version or `latest` reads it, and the plan is the same as with the age known."""
    installed = probe_local("apt", name=["bash"], update_cache=True)
    assert "lists_mtime=" not in installed and "now=" in installed
    assert plan("apt", installed, name=["bash"], update_cache=True).changed is False
    for args in ({"name": ["bash", "surely-not-a-package"]}, {"name": ["bash"], "state": "latest"}):
        assert "lists_mtime=" in probe_local("apt", update_cache=True, **args)
    assert "lists_mtime=" not in probe_local("apt", name=["surely-not-a-package"])  # no update_cache


def test_a_probe_that_printed_nothing_is_refused() -> None:
    with pytest.raises(TaskFailed, match="printed nothing usable"):
        plan("apt", "", name=["curl"])


# Issue 9: a proprietary 570 driver (Ubuntu's archive naming, as in NVIDIA/gpu-driver-container#186's
# `dpkg -l`) replaced by the open 580 one in ONE transaction: apt's trailing "-" purges them as it
# installs, so a killed run never leaves half of each driver.
PROPRIETARY_570 = ("pkg=nvidia-driver-570\t570.195.03-0ubuntu0.24.04.1\thi \n"
                   "pkg=nvidia-dkms-570\t570.195.03-0ubuntu0.24.04.1\tii \n")


def test_replaced_packages_are_purged_in_the_same_transaction_as_the_install() -> None:
    result = plan("apt", PROPRIETARY_570 + FRESH, name=["nvidia-headless-580-open"], purge=True,
                  replaces=["nvidia-driver-570", "nvidia-dkms-570", "libnvidia-gl-570"])
    script = script_of(result)
    assert result.changed
    assert script.count(f"{APT_GET} install") == 1 and f"{APT_GET} purge" not in script
    assert "--purge --allow-change-held-packages 'nvidia-headless-580-open' 'nvidia-driver-570-' 'nvidia-dkms-570-'" \
        in script
    assert "libnvidia-gl-570" not in script  # not installed: nothing to replace
    assert result.summary == "install nvidia-headless-580-open; purge nvidia-driver-570 nvidia-dkms-570 (replaced)"
    assert_commands_parse(result)


def test_nothing_to_replace_is_converged() -> None:
    result = plan("apt", "pkg=nvidia-headless-580-open\t580.95.05-1\tii \n" + FRESH,
                  name=["nvidia-headless-580-open"], replaces=["nvidia-driver-570"])
    assert not result.changed and result.commands == []


def test_replaces_takes_names_only() -> None:
    with pytest.raises(ValueError, match="without versions"):
        make_args("apt", name=["a"], replaces=["b=1"])


HOLDER = """
import fcntl, sys, time
with open(sys.argv[1], "w") as lock:
    fcntl.lockf(lock, fcntl.LOCK_EX)
    print("locked", flush=True)
    time.sleep(float(sys.argv[2]))
"""


def test_a_held_dpkg_lock_is_waited_for_with_progress_naming_the_holder(tmp_path):
    """Before: apt-get waited silently (DPkg::Lock::Timeout), 45 s seen with nothing printed."""
    import subprocess
    import sys
    import time

    from tests.unit.ops_support import LocalTestConnection

    lock = tmp_path / "lock-frontend"
    # held 3 s: one 5-s poll of the wait (dpkg_lock.sh) sees it, the next finds it free
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(lock), "3"], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "locked"
    started = time.monotonic()
    lines: list[str] = []
    done = LocalTestConnection().run(f"{dpkg_lock_script()}\nwait_dpkg_lock 60\necho free", sudo=False,
                                     env={"DPKG_LOCK_FILES": str(lock)}, on_output=lines.append)
    holder.wait()
    assert done.rc == 0 and done.stdout.strip().endswith("free"), done.stderr
    assert time.monotonic() - started >= 5, "it did not wait for the holder"
    waits = [line for line in lines if line.startswith("dpkg_lock=")]
    assert waits and f"\t{holder.pid}\t" in waits[0] and "python" in waits[0] and "import fcntl" in waits[0]


def test_a_dpkg_lock_held_too_long_fails_naming_the_holder(tmp_path):
    import subprocess
    import sys

    from tests.unit.ops_support import LocalTestConnection

    lock = tmp_path / "lock-frontend"
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(lock), "20"], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        done = LocalTestConnection().run(f"{dpkg_lock_script()}\nwait_dpkg_lock 2", sudo=False,
                                         env={"DPKG_LOCK_FILES": str(lock)})
        assert done.rc == 1 and f"still held by process {holder.pid} (python" in done.stderr
        assert "after 2s: " in done.stderr and "import fcntl" in done.stderr and "run again" in done.stderr
    finally:
        holder.kill()
        holder.wait()


def test_apply_shows_the_dpkg_lock_wait_as_progress():
    from provision.connection.base import CommandResult
    from provision.ops import REGISTRY
    from tests.unit.ops_support import ScriptedConnection, context

    result = plan("apt", FRESH, name=["jq"])
    waited = "dpkg_lock=0\t2839\t/usr/bin/python3 /usr/bin/unattended-upgrade\ndpkg_lock=5\t2839\t/usr/bin/python3 " \
             "/usr/bin/unattended-upgrade\nSetting up jq\n"
    progress: list[tuple] = []
    REGISTRY["apt"].apply(context(ScriptedConnection([CommandResult(waited, "", 0)]), progress=progress), result)
    assert progress[-1][0] == ("waiting for the dpkg lock held by process 2839 "
                               "(/usr/bin/python3 /usr/bin/unattended-upgrade) for 5 s")


@pytest.mark.parametrize(("status", "interrupted"), [
    ("install ok installed", False), ("deinstall ok config-files", False), ("hold ok installed", False),
    ("install ok unpacked", True), ("install ok half-configured", True), ("install reinstreq half-installed", True),
    ("install ok triggers-pending", True), ("install ok triggers-awaited", True),
])
def test_the_interrupted_dpkg_check_reads_the_states_dpkg_audit_lists(tmp_path, status, interrupted):
    """The probe's one grep on dpkg's status file finds what `dpkg --audit` calls installed only
    partially (the states `dpkg --configure -a` finishes), in a stanza as dpkg writes it."""
    stanza = f"Package: jq\nStatus: {status}\nPriority: optional\nVersion: 1.6-2.1\n\n"
    (tmp_path / "status").write_text("Package: base-files\nStatus: install ok installed\n\n" + stanza)
    assert ("dpkg_audit=1" in interrupted_check(tmp_path)) is interrupted


def interrupted_check(folder) -> str:
    """The apt probe's interrupted-dpkg lines run by bash on `folder`/status, stamps in `folder`."""
    import subprocess

    from provision.ops.apt import interrupted_dpkg_probe

    script = interrupted_dpkg_probe(str(folder / "status"), str(folder / "read"))
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True).stdout


def test_the_status_file_is_read_again_only_when_it_changed_or_was_not_clean(tmp_path):
    """A converged rerun skips the grep (its cost is most of an apt probe's) while the status file is
    older than the last read that found it clean; a write of it after that read, a read that found a
    package half-way, or a read cut short before it said clean (a killed probe) make the next read again.
    Shown by a status file whose content changed under an unchanged time: read or not read."""
    import os

    status, checked, clean = tmp_path / "status", tmp_path / "read.checked", tmp_path / "read.clean"
    half = "Package: jq\nStatus: install ok unpacked\n\n"

    def write_status(text: str, age_s: float) -> None:
        status.write_text(text)
        os.utime(status, (status.stat().st_atime, status.stat().st_mtime - age_s))

    write_status("Package: jq\nStatus: install ok installed\n\n", 10)
    assert interrupted_check(tmp_path) == "" and checked.exists() and clean.exists()
    write_status(half, 10)  # changed, but its time says older than the clean read: not read
    assert interrupted_check(tmp_path) == ""
    write_status(half, -1)  # written after that read: read again, found
    assert interrupted_check(tmp_path) == "dpkg_audit=1\n"
    write_status(half, 10)  # a read that found it half-way says so again, whatever the times
    assert interrupted_check(tmp_path) == "dpkg_audit=1\n"
    write_status("Package: jq\nStatus: install ok installed\n\n", 10)
    assert interrupted_check(tmp_path) == ""  # repaired: read, clean
    write_status(half, 10)
    os.utime(clean, (clean.stat().st_atime, checked.stat().st_mtime - 1))  # killed between its two stamps
    assert interrupted_check(tmp_path) == "dpkg_audit=1\n"
    checked.unlink()
    clean.unlink()  # no stamps (a host an older provision converged): read
    assert interrupted_check(tmp_path) == "dpkg_audit=1\n"


def test_the_cache_age_is_the_newest_package_list_or_update_stamp(tmp_path):
    """One stat of the lists and the stamp (no find | sort | tail): the newest regular file counts,
    not apt's lock file nor the `partial/` folder, whose times say nothing about the lists."""
    import os
    import subprocess

    from provision.ops.apt import PROBE_LISTS, UPDATE_STAMP, parse_state

    lists = tmp_path / "lists"
    (lists / "partial").mkdir(parents=True)
    stamp = tmp_path / "update-success-stamp"
    for name, mtime in [("deb.debian.org_debian_dists_bookworm_InRelease", NOW - 7200),
                        ("deb.debian.org_debian_dists_bookworm_main_binary-amd64_Packages", NOW - 3600),
                        ("lock", NOW - 10)]:
        (lists / name).write_text("x")
        os.utime(lists / name, (mtime, mtime))
    os.utime(lists / "partial", (NOW - 5, NOW - 5))
    stamp.write_text("")
    os.utime(stamp, (NOW - 5400, NOW - 5400))
    script = PROBE_LISTS.replace("/var/lib/apt/lists", str(lists)).replace(UPDATE_STAMP, str(stamp))
    out = subprocess.run(["bash", "-c", f"set +e +u\n{script}"], capture_output=True, text=True, check=True).stdout
    assert f"lists_mtime={NOW - 3600}\n" in out
    assert parse_state(f"now={NOW}\nlists_mtime={NOW - 3600}\n").cache_age == 3600
    os.utime(stamp, (NOW - 60, NOW - 60))  # `apt-get update` that changed no list still counts
    out = subprocess.run(["bash", "-c", f"set +e +u\n{script}"], capture_output=True, text=True, check=True).stdout
    assert f"lists_mtime={NOW - 60}\n" in out


def test_apply_shows_a_stalled_update_run_again_as_progress():
    from provision.connection.base import CommandResult
    from provision.ops import REGISTRY
    from tests.unit.ops_support import ScriptedConnection, context

    result = plan("apt", FRESH, name=["jq"], update_cache=True)
    output = "Get:1 http://deb.debian.org/debian bookworm InRelease\napt_update_stalled=120\t2\t3\nSetting up jq\n"
    progress: list[tuple] = []
    REGISTRY["apt"].apply(context(ScriptedConnection([CommandResult(output, "", 0)]), progress=progress), result)
    assert progress[-1][0] == "apt-get update wrote nothing for 120 s: stopped, run 2 of 3"

"""The GPU roles on recorded facts: site order, preflight refusals, the driver's packages and reboot rule."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from provision.errors import TaskFailed
from provision.facts import parse_probe
from provision.ops import REGISTRY
from tests.unit.ops_support import probe_local
from tests.unit.test_roles_gpu_support import (
    UBUNTU_2004,
    apt_specs,
    facts,
    render_tasks,
    site_play,
)

RECORDED = Path(__file__).parent / "fixtures" / "recorded"
FRESH_DEBIAN = "debian12-rtx5090-standin-fresh.txt"  # lab host: GPU, nouveau loaded, nothing installed
CONVERGED_DEBIAN = "debian12-rtx5090-standin-converged.txt"  # lab host after `provision up`, 580.95.05
WORKING_UBUNTU = "rtx5090-laptop-ubuntu2404.txt"  # a laptop with the 580 open driver working
BEFORE_REBOOT_UBUNTU = "rtx5090-installed-before-reboot.txt"  # driver installed, nouveau still loaded
REFUSALS = ("an NVIDIA GPU is on the PCI bus", "the operating system is supported", "the architecture is supported",
            "PRIME does not switch the NVIDIA GPU off", "Secure Boot allows the driver's kernel module (Ubuntu)",
            "Secure Boot allows the driver's kernel module")
REBOOT, NO_REBOOT_ALLOWED, LOAD = ("reboot for the NVIDIA driver", "reboot required but not allowed",
                                   "NVIDIA driver loaded without a reboot")


def test_site_runs_the_gpu_stack_in_order() -> None:
    assert [role.name for role in site_play().roles] == [
        "preflight", "plan", "offline_bundle", "office_cache_client", "nvidia_driver", "cuda_toolkit", "docker",
        "container_toolkit", "host_tuning"]


def test_every_notify_names_a_handler_of_the_play_and_docker_restarts_before_the_gpu_check() -> None:
    handlers = [handler.name for handler in site_play().handlers]
    notified = {name for task in site_play().tasks for name in task.notify}
    assert notified <= set(handlers)
    assert handlers.index("restart docker") < handlers.index("a container sees the GPU after the restart")


@pytest.mark.parametrize("fixture", [FRESH_DEBIAN, CONVERGED_DEBIAN, WORKING_UBUNTU, BEFORE_REBOOT_UBUNTU,
                                     "h200-driver580-nopackages.txt"])
def test_every_task_and_handler_renders_to_valid_arguments(fixture: str) -> None:
    assert render_tasks(facts(fixture))
    assert render_tasks(facts(fixture), handlers=True)


def test_a_good_host_passes_every_refusal() -> None:
    for fixture in (FRESH_DEBIAN, WORKING_UBUNTU):
        rendered = render_tasks(facts(fixture))
        assert [name for name in REFUSALS if rendered[name].active] == []


@pytest.mark.parametrize(("fixture", "overrides", "refusal", "says"), [
    ("debian12-nogpu.txt", {}, "an NVIDIA GPU is on the PCI bus", "No NVIDIA GPU on the PCI bus"),
    (FRESH_DEBIAN, {"os": UBUNTU_2004}, "the operating system is supported", "Ubuntu 20.04.6 LTS is not supported"),
    (FRESH_DEBIAN, {"arch": "aarch64"}, "the architecture is supported", "architecture is aarch64"),
    (FRESH_DEBIAN, {"prime_profile": "intel"}, "PRIME does not switch the NVIDIA GPU off", "sudo prime-select nvidia"),
    (BEFORE_REBOOT_UBUNTU, {"secure_boot": "enabled"}, "Secure Boot allows the driver's kernel module (Ubuntu)",
     "nvidia_driver_signed_modules: true"),
    (FRESH_DEBIAN, {"secure_boot": "enabled"}, "Secure Boot allows the driver's kernel module",
     "needs someone at the physical console"),
])
def test_each_refusal_has_its_own_message(fixture: str, overrides: dict, refusal: str, says: str) -> None:
    rendered = render_tasks(facts(fixture, **overrides))
    assert [name for name in REFUSALS if rendered[name].active] == [refusal]
    assert says in rendered[refusal].args.msg


def test_secure_boot_is_fine_with_signed_modules_an_enrolled_key_or_a_working_driver() -> None:
    ubuntu = facts(BEFORE_REBOOT_UBUNTU, secure_boot="enabled")
    debian = facts(FRESH_DEBIAN, secure_boot="enabled", dkms_key_enrolled=True)  # mokutil --test-key confirms
    assert not any(render_tasks(ubuntu, nvidia_driver_signed_modules=True)[name].active for name in REFUSALS)
    assert not any(render_tasks(debian, nvidia_driver_secure_boot_mok=True)[name].active for name in REFUSALS)
    working = facts(WORKING_UBUNTU, secure_boot="enabled")
    assert not any(render_tasks(working)[name].active for name in REFUSALS)


@pytest.mark.parametrize("fixture", [FRESH_DEBIAN, BEFORE_REBOOT_UBUNTU])
def test_a_bios_boot_gets_no_secure_boot_refusal_and_no_mok_advice(fixture: str) -> None:
    """Booted without EFI (mokutil's recorded answer), Secure Boot cannot refuse the unsigned module."""
    bios = parse_probe((RECORDED / "secure-boot-bios-mokutil.txt").read_text()).secure_boot
    rendered = render_tasks(facts(fixture, secure_boot=bios))
    assert bios == "bios"
    assert [name for name in REFUSALS if rendered[name].active] == []
    assert not any("mokutil" in str(getattr(r.args, "msg", "")) for r in rendered.values() if r.active)


def test_the_fresh_ubuntu_laptop_of_the_issue_is_refused_for_prime_first() -> None:
    rendered = render_tasks(facts("rtx5090-fresh-secureboot.txt"))
    assert next(name for name in REFUSALS if rendered[name].active) == "PRIME does not switch the NVIDIA GPU off"


def disk_check(**host_vars: object) -> object:
    """The preflight disk check, planned on this machine's disk (its probe is a read-only df)."""
    task = render_tasks(facts(FRESH_DEBIAN), **host_vars)["enough free disk for the image and the weights"]
    arguments = task.args.model_dump()
    op = REGISTRY["verify"]
    return op.plan(task.args, None, op.probe(task.args).parse(probe_local("verify", **arguments)))


def test_disk_refusal_fails_at_once_with_what_was_measured() -> None:
    assert disk_check(preflight_min_free_gib=0, preflight_disk_path="/nonexistent/docker").summary.endswith(
        "0 GiB needed")
    with pytest.raises(TaskFailed, match=r"(?s)Not enough free disk.*GiB free on the filesystem of /, 10000000 GiB"):
        disk_check(preflight_min_free_gib=10_000_000, preflight_disk_path="/nonexistent/docker")


def test_a_rerun_needs_room_only_for_what_is_not_here_yet(tmp_path) -> None:
    """The weights already in the cache count as found (the image too, by `docker image inspect`): a
    laptop serving its model with less free disk than a first apply needs can still take a flag change.
    Shown on this machine's disk with a sparse 4 GiB blob (its apparent size: what a fetch would write)."""
    import shutil

    free_gib = shutil.disk_usage(tmp_path).free // 2**30
    blobs = tmp_path / "hub" / "models--provision-test--model" / "blobs"
    blobs.mkdir(parents=True)
    check = {"preflight_min_free_gib": free_gib + 2, "preflight_disk_path": str(tmp_path), "hf_home": str(tmp_path),
             "hf_model": "provision-test/model", "vllm_image": "provision-test/not-an-image:none"}
    with pytest.raises(TaskFailed, match=r"the image and the weights already here: 0 MiB"):
        disk_check(**check)
    with (blobs / "0123abcd").open("wb") as blob:
        blob.truncate(4 * 2**30)
    assert disk_check(**check).summary.endswith("the image and the weights already here: 4096 MiB)")


def test_what_docker_prints_is_counted_only_as_digits(tmp_path, monkeypatch) -> None:
    """The image's size is the host's output: in bash arithmetic `a[$(cmd)]` would run cmd."""
    import shutil

    shim = tmp_path / "bin"
    shim.mkdir()
    (shim / "docker").write_text(f"#!/bin/sh\necho 'a[$(touch {tmp_path}/ran)]'\n")
    (shim / "docker").chmod(0o755)
    monkeypatch.setenv("PATH", f"{shim}:{os.environ['PATH']}")
    free_gib = shutil.disk_usage(tmp_path).free // 2**30
    with pytest.raises(TaskFailed, match=r"the image and the weights already here: 0 MiB"):
        disk_check(preflight_min_free_gib=free_gib + 2, preflight_disk_path=str(tmp_path), hf_home=str(tmp_path),
                   hf_model="provision-test/model", vllm_image="provision-test/image:x")
    assert not (tmp_path / "ran").exists()


def test_the_gpu_found_is_reported_with_what_the_driver_knows() -> None:
    working = render_tasks(facts(WORKING_UBUNTU))["NVIDIA GPU found"].args.msg
    assert working == ("0000:02:00.0 [10de:2c58]: NVIDIA GeForce RTX 5090 Laptop GPU, compute capability 12.0, "
                       "24463 MiB, driver 580.95.05 (open kernel module)")
    fresh = render_tasks(facts(FRESH_DEBIAN))["NVIDIA GPU found"].args.msg
    assert fresh == "0000:01:00.0 [10de:2c58]: no driver answering yet (nvidia-smi is not installed)"


def test_waits_run_only_when_there_is_something_to_wait_for() -> None:
    idle = render_tasks(facts(FRESH_DEBIAN))
    assert idle["the dpkg lock is free"].skipped and idle["cloud-init has finished"].skipped
    busy = render_tasks(facts(FRESH_DEBIAN, dpkg_locked=True, cloud_init=True), preflight_dpkg_lock_timeout=30)
    assert busy["the dpkg lock is free"].active and busy["the dpkg lock is free"].args.timeout == 30
    assert "cloud-init status --wait" in busy["cloud-init has finished"].args.cmd


def test_preflight_shows_who_holds_the_dpkg_lock_while_it_waits(tmp_path, monkeypatch) -> None:
    """Before: the preflight wait sent the lock's lines to /dev/null: 45 s with nothing on screen at the
    start of a run (the apt operation's own wait, mid-run, did name the holder)."""
    import subprocess
    import sys

    from provision.ops import REGISTRY
    from tests.unit.ops_support import LocalTestConnection, context
    from tests.unit.test_ops_apt import HOLDER

    lock = tmp_path / "lock-frontend"
    monkeypatch.setenv("DPKG_LOCK_FILES", str(lock))  # dpkg_lock.sh's list of lock files, for a test
    # held 3 s: one 5-s poll of the wait (dpkg_lock.sh) sees it, the next finds it free
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(lock), "3"], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "locked"
    task = render_tasks(facts(FRESH_DEBIAN, dpkg_locked=True), preflight_dpkg_lock_timeout=30)["the dpkg lock is free"]
    operation = REGISTRY[task.task.op]
    planned = operation.plan(task.args, facts(FRESH_DEBIAN), None)
    progress: list[tuple[object, ...]] = []
    done = operation.apply(context(LocalTestConnection(), progress=progress), planned)
    holder.wait()
    assert not done.changed and "the dpkg lock is free" in done.stdout
    assert progress, "the wait showed nothing"
    assert progress[0][0].startswith(f"waiting for the dpkg lock held by process {holder.pid} (")
    assert "import fcntl" in progress[0][0]


def test_debian_gets_the_compute_only_open_driver_of_the_branch_pinned_and_held() -> None:
    driver = render_tasks(facts(FRESH_DEBIAN))["NVIDIA open driver installed and held"].args
    assert driver.name == ["nvidia-driver-cuda=580.*", "nvidia-kernel-open-dkms=580.*"]
    assert driver.hold is True and driver.start_services is False
    pinned = render_tasks(facts(FRESH_DEBIAN), nvidia_driver_version="580.95.05")
    assert pinned["NVIDIA open driver installed and held"].args.name == [
        "nvidia-driver-cuda=580.95.05-*", "nvidia-kernel-open-dkms=580.95.05-*"]
    assert "Pin: version 580.95.05-*\nPin-Priority: 1000" in pinned["NVIDIA driver pinned to its release"].args.content


def test_ubuntu_gets_the_headless_open_driver_or_canonicals_signed_modules() -> None:
    server = facts(WORKING_UBUNTU, prime_profile=None)  # no display on the GPU: the compute-only flavour
    rendered = render_tasks(server, nvidia_driver_source="nvidia")
    assert rendered["NVIDIA open driver installed and held"].args.name == [
        "nvidia-headless-580-open=580.*", "nvidia-utils-580=580.*"]
    assert rendered["Canonical's signed NVIDIA kernel modules"].skipped
    signed = render_tasks(server, nvidia_driver_source="ubuntu", nvidia_driver_signed_modules=True,
                          nvidia_driver_kernel_flavour="generic-hwe-24.04")
    # the flavour's meta only: it brings the current ABI's modules (issue 21, item 6)
    assert signed["Canonical's signed NVIDIA kernel modules"].args.name == [
        "linux-modules-nvidia-580-open-generic-hwe-24.04"]
    assert signed["NVIDIA open driver installed and held"].args.name == [
        "nvidia-headless-no-dkms-580-open=580.*", "nvidia-utils-580=580.*"]
    assert signed["kernel headers and DKMS"].skipped


def test_headers_of_the_running_kernel_and_the_meta_package_or_none_when_overridden() -> None:
    debian = render_tasks(facts(FRESH_DEBIAN))["kernel headers and DKMS"].args.name
    assert debian == ["linux-headers-6.18.44-fc-v595", "linux-headers-amd64", "dkms", "build-essential"]
    ubuntu = render_tasks(facts(WORKING_UBUNTU), nvidia_driver_source="nvidia")["kernel headers and DKMS"].args.name
    assert ubuntu[:2] == ["linux-headers-6.14.0-33-generic", "linux-headers-generic"]
    lab = render_tasks(facts(FRESH_DEBIAN), nvidia_kernel_headers={"debian": []}, nvidia_dkms_packages=[])
    assert lab["kernel headers and DKMS"].skipped


@pytest.mark.parametrize("host_vars", [{}, {"nvidia_driver_signed_modules": True},
                                       {"nvidia_driver_version": "580.95.05"}])
@pytest.mark.parametrize("fixture", [FRESH_DEBIAN, WORKING_UBUNTU])
def test_never_the_packages_that_pull_the_proprietary_flavour(fixture: str, host_vars: dict) -> None:
    names = {spec.partition("=")[0] for spec in apt_specs(render_tasks(facts(fixture), **host_vars))}
    assert names.isdisjoint({"cuda-drivers", "cuda", "cuda-12-9", "nvidia-kernel-dkms", "nvidia-open"})


def test_the_cuda_repository_of_the_distribution_under_the_configured_base() -> None:
    base = "http://mirror.office:8080/cuda/repos"
    debian = render_tasks(facts(FRESH_DEBIAN), nvidia_cuda_repo_base=base)
    assert debian["NVIDIA CUDA repository (cuda-keyring)"].args.keyring_package_url == (
        f"{base}/debian12/x86_64/cuda-keyring_1.1-1_all.deb")
    ubuntu = render_tasks(facts(WORKING_UBUNTU))
    assert ubuntu["NVIDIA CUDA repository (cuda-keyring)"].args.keyring_package_url == (
        "https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2404/x86_64/cuda-keyring_1.1-1_all.deb")


def active(rendered: dict, *names: str) -> list[str]:
    return [name for name in names if rendered[name].active]


def test_nouveau_holding_the_gpu_means_one_reboot() -> None:
    rendered = render_tasks(facts(BEFORE_REBOOT_UBUNTU))
    assert active(rendered, LOAD, NO_REBOOT_ALLOWED, REBOOT) == [REBOOT]
    assert rendered[REBOOT].args.reason == "nouveau holds the GPU"
    never = render_tasks(facts(BEFORE_REBOOT_UBUNTU), nvidia_reboot="never")
    assert active(never, LOAD, NO_REBOOT_ALLOWED, REBOOT) == [NO_REBOOT_ALLOWED]
    assert never[NO_REBOOT_ALLOWED].args.msg.startswith("reboot required")


def test_a_converged_host_never_reboots() -> None:
    for fixture, version in ((CONVERGED_DEBIAN, "580.95.05"), (WORKING_UBUNTU, "")):
        rendered = render_tasks(facts(fixture), nvidia_driver_version=version)
        assert active(rendered, LOAD, NO_REBOOT_ALLOWED, REBOOT) == []


def test_a_new_pin_with_the_old_driver_loaded_reboots_once() -> None:
    rendered = render_tasks(facts(CONVERGED_DEBIAN), nvidia_driver_version="580.105.08")
    assert active(rendered, LOAD, REBOOT) == [REBOOT]
    assert rendered[REBOOT].args.reason == "driver 580.95.05 is loaded, another is installed"
    branch = render_tasks(facts(CONVERGED_DEBIAN), nvidia_driver_branch="590")
    assert active(branch, REBOOT) == [REBOOT]


def test_a_version_mismatch_reboots() -> None:
    mismatch = facts(CONVERGED_DEBIAN, nvidia_smi_ok=False, gpus=(), nvidia_smi_rc=18)
    assert active(render_tasks(mismatch, nvidia_driver_version="580.95.05"), REBOOT) == [REBOOT]


def test_without_nouveau_the_driver_is_loaded_and_a_reboot_follows_only_if_that_failed() -> None:
    fresh = facts(FRESH_DEBIAN, nouveau_loaded=False)
    rendered = render_tasks(fresh)
    assert active(rendered, LOAD, REBOOT) == [LOAD]
    assert "modprobe nvidia && modprobe nvidia_uvm && nvidia-smi" in rendered[LOAD].args.cmd
    loaded = render_tasks(fresh, registered={"nvidia_driver_load": {"changed": True, "stdout": "driver loaded\n"}})
    assert active(loaded, REBOOT) == []
    failed = {"nvidia_driver_load": {"changed": True, "stdout": "the driver did not load: a reboot is needed\n"}}
    assert active(render_tasks(fresh, registered=failed), REBOOT) == [REBOOT]


def test_the_driver_check_asks_for_every_gpu_the_pinned_version_and_the_open_module() -> None:
    check = render_tasks(facts(FRESH_DEBIAN), nvidia_driver_version="580.95.05")[
        "NVIDIA driver verified with nvidia-smi"].args
    assert check.defer and "-ne 1 ]" in check.cmd and "580.95.05) ;;" in check.cmd
    assert "Open Kernel Module" in check.cmd
    assert "580.*) ;;" in render_tasks(facts(FRESH_DEBIAN))["NVIDIA driver verified with nvidia-smi"].args.cmd

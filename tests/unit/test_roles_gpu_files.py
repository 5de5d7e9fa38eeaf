"""The GPU roles' files and checks on recorded facts: apt pin, unattended-upgrades, modules, CUDA's
profile.d entry, the container toolkit's packages and daemon.json check, host tuning switches."""

from __future__ import annotations

import json
import subprocess

from tests.unit.ops_support import plan, script_of
from tests.unit.test_roles_gpu_support import facts, render_tasks, site_play

FRESH_DEBIAN = "debian12-rtx5090-standin-fresh.txt"


def content(task: str, **host_vars: object) -> str:
    return render_tasks(facts(FRESH_DEBIAN), **host_vars)[task].args.content


def test_driver_files_pin_hold_out_unattended_upgrades_blacklist_nouveau_and_load_at_boot() -> None:
    assert "Pin: version 580.*\nPin-Priority: 1000\n" in content("NVIDIA driver pinned to its release")
    unattended = content("NVIDIA driver kept out of unattended-upgrades")
    assert 'Unattended-Upgrade::Package-Blacklist {\n    "nvidia-(?!container-)";\n    "libnvidia-(?!container)";' \
        in unattended
    assert '    "cuda-";\n};\n' in unattended
    assert content("nouveau blacklisted").splitlines()[1:] == ["blacklist nouveau", "options nouveau modeset=0"]
    assert content("NVIDIA modules loaded at boot").splitlines()[1:] == ["nvidia", "nvidia_uvm"]


def test_the_initramfs_is_rebuilt_only_while_older_than_the_blacklist(tmp_path) -> None:
    unless = render_tasks(facts(FRESH_DEBIAN))["initramfs updated for the nouveau blacklist"].args.unless
    boot, conf = tmp_path / "initrd.img-test", tmp_path / "blacklist-nouveau.conf"
    tool = tmp_path / "bin" / "update-initramfs"
    tool.parent.mkdir()
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    script = (unless.replace('/boot/initrd.img-$(uname -r)', str(boot))
              .replace("/etc/modprobe.d/blacklist-nouveau.conf", str(conf)))

    def skipped() -> bool:
        env = {"PATH": f"{tool.parent}:/usr/bin:/bin"}
        return subprocess.run(["bash", "-c", script], env=env, check=False).returncode == 0

    assert skipped()  # no initramfs for the running kernel: nothing to update
    boot.write_text("old")
    conf.write_text("blacklist nouveau\n")
    subprocess.run(["touch", "-d", "1 hour ago", str(boot)], check=True)
    assert not skipped()  # the blacklist is newer than the initramfs
    boot.write_text("new")
    assert skipped()


def test_cuda_toolkit_package_path_and_check_or_nothing_when_off() -> None:
    rendered = render_tasks(facts(FRESH_DEBIAN))
    assert rendered["CUDA toolkit installed"].args.name == ["cuda-toolkit-12-9", "g++"]
    assert "release 12.9," in rendered["nvcc reports the CUDA version"].args.cmd
    off = render_tasks(facts(FRESH_DEBIAN), cuda_toolkit_enabled=False)
    assert all(off[name].skipped for name in (
        "CUDA toolkit installed", "CUDA on PATH and LD_LIBRARY_PATH", "nvcc reports the CUDA version",
        "nvcc compiles and links a CUDA program"))


def test_cuda_profile_entry_adds_the_toolkit_once_for_login_shells() -> None:
    profile = content("CUDA on PATH and LD_LIBRARY_PATH")
    shell = f"{profile}\n{profile}\nprintf '%s\\n' \"$PATH\" \"$LD_LIBRARY_PATH\""
    done = subprocess.run(["sh", "-c", shell], env={"PATH": "/usr/bin:/bin"}, capture_output=True, text=True,
                          check=True)
    assert done.stdout.splitlines() == ["/usr/local/cuda-12.9/bin:/usr/bin:/bin", "/usr/local/cuda-12.9/lib64"]


def test_the_four_container_toolkit_packages_are_pinned_together() -> None:
    rendered = render_tasks(facts(FRESH_DEBIAN), nvidia_container_repo_base="http://mirror.office/libnvidia-container")
    assert rendered["NVIDIA Container Toolkit installed"].args.name == [
        "nvidia-container-toolkit=1.18.2-1", "nvidia-container-toolkit-base=1.18.2-1",
        "libnvidia-container-tools=1.18.2-1", "libnvidia-container1=1.18.2-1"]
    repo = rendered["NVIDIA Container Toolkit repository"].args
    assert repo.key_url == "http://mirror.office/libnvidia-container/gpgkey"
    assert repo.uris == ["http://mirror.office/libnvidia-container/stable/deb/$(ARCH)"] and repo.suites == ["/"]
    assert repo.keyring_path == "/usr/share/keyrings/nvidia-container-toolkit-keyring.gpg"
    newest = render_tasks(facts(FRESH_DEBIAN), nvidia_container_toolkit_version="")
    assert newest["NVIDIA Container Toolkit installed"].args.name[0] == "nvidia-container-toolkit"


def test_nvidia_ctk_runs_only_while_daemon_json_lacks_the_nvidia_runtime(tmp_path) -> None:
    unless = render_tasks(facts(FRESH_DEBIAN))["docker knows the nvidia runtime"].args.unless
    daemon_json = tmp_path / "daemon.json"
    script = unless.replace("/etc/docker/daemon.json", str(daemon_json))

    def configured() -> bool:
        return subprocess.run(["bash", "-c", script], check=False).returncode == 0

    assert not configured()  # no file yet
    daemon_json.write_text(json.dumps({"log-driver": "json-file", "runtimes": {"runc-v2": {"path": "x"}}}))
    assert not configured()
    # as nvidia-ctk writes it (Go's indented JSON), after the docker role's settings
    daemon_json.write_text(json.dumps({"log-driver": "json-file", "runtimes": {
        "nvidia": {"args": [], "path": "nvidia-container-runtime"}}}, indent=4, sort_keys=True))
    assert configured()


def test_the_gpu_in_a_container_is_checked_once_per_run() -> None:
    quiet = render_tasks(facts(FRESH_DEBIAN), container_toolkit_check_image="10.0.2.2:5000/check:1")
    assert quiet["a container sees the GPU"].args.cmd == (
        "'/usr/local/sbin/provision-gpu-in-container-check' --cuda '10.0.2.2:5000/check:1' --gpus all")
    # docker due for a restart (notified in this run, or left over by a killed run): the handler checks
    due = {"notified_handlers": ["restart docker", "a container sees the GPU after the restart"]}
    assert render_tasks(facts(FRESH_DEBIAN), registered=due)["a container sees the GPU"].skipped
    handler = render_tasks(facts(FRESH_DEBIAN), handlers=True)["a container sees the GPU after the restart"]
    # after a restart it checks for real, whatever pass it kept (the digest may not see what moved)
    assert handler.args.cmd == ("PROVISION_GPU_CHECK_AGAIN=1 "
                                "'/usr/local/sbin/provision-gpu-in-container-check' --cuda "
                                "'vllm/vllm-openai:v0.21.0-cu129' --gpus all")


def test_host_tuning_items_and_their_switches() -> None:
    rendered = render_tasks(facts(FRESH_DEBIAN))
    assert rendered["sleep targets masked"].args.cmd == (
        "systemctl mask 'sleep.target' 'suspend.target' 'hibernate.target' 'hybrid-sleep.target'")
    assert rendered["lid switch ignored"].args.dest == "/etc/systemd/logind.conf.d/provision.conf"
    assert rendered["lid switch ignored"].args.content.splitlines()[1:] == [
        "[Login]", "HandleLidSwitch=ignore", "HandleLidSwitchExternalPower=ignore", "HandleLidSwitchDocked=ignore"]
    assert rendered["lid switch ignored"].task.notify == ["systemd-logind reloads its settings"]
    persistence = rendered["GPU persistence mode (nvidia-persistenced running)"].args
    assert (persistence.name, persistence.enabled, persistence.state) == ("nvidia-persistenced", True, "started")
    off = render_tasks(facts(FRESH_DEBIAN), host_tuning_mask_sleep=False, host_tuning_ignore_lid_switch=False,
                       host_tuning_persistence_mode=False)
    assert all(off[name].skipped for name in ("sleep targets masked", "lid switch ignored",
                                               "GPU persistence mode (nvidia-persistenced running)"))


def test_upgrading_held_driver_packages_holds_them_again() -> None:
    held = ("pkg=nvidia-driver-cuda\t580.95.05-1\thi \npkg=nvidia-kernel-open-dkms\t580.95.05-1\thi \n"
            "now=100\nlists_mtime=99\n")
    result = plan("apt", held, name=["nvidia-driver-cuda=580.105.08-*", "nvidia-kernel-open-dkms=580.105.08-*"],
                  hold=True)
    script = script_of(result)
    assert "--allow-change-held-packages" in script
    assert script.index("install") < script.index("apt-mark hold 'nvidia-driver-cuda' 'nvidia-kernel-open-dkms'")


LOGIND = "systemd-logind reloads its settings"


def logind_handler(tmp_path, can_reload: str, sessions: str) -> tuple[str, str]:
    """Run the handler's script with systemctl and loginctl answering as recorded; (stdout, systemctl calls)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "systemctl").write_text(
        f'#!/bin/sh\necho "$*" >> {tmp_path}/calls\n[ "$1" = show ] && echo {can_reload}\nexit 0\n')
    (bin_dir / "loginctl").write_text(f"#!/bin/sh\nprintf '{sessions}'\n")
    for tool in ("systemctl", "loginctl"):
        (bin_dir / tool).chmod(0o755)
    cmd = render_tasks(facts(FRESH_DEBIAN), handlers=True)[LOGIND].args.cmd
    # as the command op runs it: bash with errexit, nounset and pipefail
    out = subprocess.run(["bash", "-euo", "pipefail", "-c", cmd], capture_output=True, text=True, check=True,
                         env={"PATH": f"{bin_dir}:/usr/bin:/bin"}).stdout
    calls = (tmp_path / "calls").read_text()
    return out, calls


def test_systemd_logind_is_never_restarted_with_someone_logged_in(tmp_path) -> None:
    # issue 9: a restart ends the desktop session (systemd/systemd#17308, #39437)
    # one line per session in `loginctl list-sessions --no-legend` (the handler counts them)
    out, calls = logind_handler(tmp_path, "no", "      2 1000 anna seat0 tty2 active no -\n")
    assert "restart" not in calls and "apply at the next boot" in out and "1 session(s)" in out
    assert not any("logind" in task.name and task.op == "systemd" for task in site_play().handlers)


def test_systemd_logind_reloads_where_it_can_and_restarts_only_with_nobody_there(tmp_path) -> None:
    reload_dir, empty_dir = tmp_path / "reload", tmp_path / "empty"
    reload_dir.mkdir()
    empty_dir.mkdir()
    out, calls = logind_handler(reload_dir, "yes", "      2 1000 anna seat0 tty2 active no -\n")
    assert "reload systemd-logind.service" in calls and "restart" not in calls and "apply now" in out
    out, calls = logind_handler(empty_dir, "no", "")
    assert "restart systemd-logind.service" in calls and "nobody logged in" in out
    # and unattended-upgrades' shutdown helper with it, else the next reboot waits 30 s for its delay lock
    assert calls.index("restart systemd-logind.service") < calls.index("restart unattended-upgrades.service")


def test_persistence_mode_is_really_on_and_checked_with_nvidia_smi() -> None:
    # NVIDIA's Ubuntu packaging runs `nvidia-persistenced --no-persistence-mode`: override it
    rendered = render_tasks(facts(FRESH_DEBIAN))
    override = rendered["nvidia-persistenced turns persistence mode on"].args
    assert override.dest == "/etc/systemd/system/nvidia-persistenced.service.d/provision.conf"
    assert "ExecStart=\nExecStart=/usr/bin/nvidia-persistenced --verbose\n" in override.content
    changed = render_tasks(facts(FRESH_DEBIAN), registered={"host_tuning_persistenced_override": {"changed": True}})
    restart = changed["GPU persistence mode (nvidia-persistenced running)"].args
    assert (restart.state, restart.daemon_reload) == ("restarted", True)
    check = rendered["persistence mode is on"].args.cmd
    assert "--query-gpu=index,persistence_mode" in check and "Enabled$" in check


def test_dockerd_downloads_the_inventorys_number_of_layers_at_once() -> None:
    """dockerd's default is 3 (docs.docker.com/reference/cli/dockerd); the user's own daemon config wins."""
    merged = render_tasks(facts(FRESH_DEBIAN))["daemon.json settings merged"].args.data
    assert merged["max-concurrent-downloads"] == 6 and merged["log-driver"] == "json-file"
    mine = render_tasks(facts(FRESH_DEBIAN), docker_max_concurrent_downloads=12,
                        docker_insecure_registries=["10.0.2.2:5000"])["daemon.json settings merged"].args.data
    assert mine["max-concurrent-downloads"] == 12 and mine["insecure-registries"] == ["10.0.2.2:5000"]
    theirs = render_tasks(facts(FRESH_DEBIAN), docker_daemon_config={"max-concurrent-downloads": 2})
    assert theirs["daemon.json settings merged"].args.data == {"max-concurrent-downloads": 2}

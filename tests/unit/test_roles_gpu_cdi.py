"""Containers keep the GPU after `systemctl daemon-reload`: CDI or the legacy hook, chosen by the
docker engine's version (a fact), on recorded facts. NVIDIA's container toolkit troubleshooting page
("Containers losing access to GPUs with error: Failed to initialize NVML: Unknown Error") and
NVIDIA/nvidia-container-toolkit#48: the runtime hook's devices are lost when systemd reloads; CDI
(docker 25+) or docker's cgroupfs driver keep them."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from provision.playbook.loader import load_playbook
from provision.playbook.templating import Renderer, make_environment
from tests.unit.test_roles_gpu_support import REPO, SITE, facts, render_tasks

CONVERGED_DEBIAN12 = "debian12-rtx5090-standin-converged.txt"  # docker.io 20.10.24+dfsg1, driver 580.95.05
TRIXIE_DOCKER = "26.1.5+dfsg1"  # `docker version --format '{{.Server.Version}}'` on a Debian 13 lab host
GOLDEN_SPEC = Path(__file__).parent / "fixtures/recorded/cdi/nvidia-ctk-generate-golden.yaml"
CHECK_SCRIPT = REPO / "roles/container_toolkit/templates/gpu-in-container-check.sh"
CDI_TASKS = ("docker reads CDI specs", "CDI spec for the running driver")
LEGACY_TASKS = ("docker keeps the containers' cgroups from systemd (cgroupfs driver)",)


def rendered_for(docker_version: str | None, **host_vars: object) -> dict:
    return render_tasks(facts(CONVERGED_DEBIAN12, docker_version=docker_version),
                        container_toolkit_check_image="check:1", **host_vars)


def test_docker_20_10_keeps_the_hook_and_takes_docker_s_cgroupfs_driver() -> None:
    rendered = rendered_for("20.10.24+dfsg1")
    assert all(rendered[name].skipped for name in CDI_TASKS)
    assert rendered[LEGACY_TASKS[0]].args.data == {"exec-opts": ["native.cgroupdriver=cgroupfs"]}
    assert rendered["a container sees the GPU"].args.cmd == (
        "'/usr/local/sbin/provision-gpu-in-container-check' --cuda 'check:1' --gpus all")


@pytest.mark.parametrize("version", [TRIXIE_DOCKER, "25.0.0", "28.5.1"])
def test_docker_25_and_newer_use_cdi(version: str) -> None:
    rendered = rendered_for(version)
    assert all(rendered[name].skipped for name in LEGACY_TASKS)
    assert rendered["docker reads CDI specs"].args.data == {"features": {"cdi": True}}
    assert rendered["a container sees the GPU"].args.cmd == (
        "'/usr/local/sbin/provision-gpu-in-container-check' --cuda 'check:1' --device nvidia.com/gpu=all")


def test_the_choice_can_be_forced_either_way() -> None:
    assert rendered_for("20.10.24", container_toolkit_gpu_injection="cdi")["docker reads CDI specs"].active
    assert rendered_for(TRIXIE_DOCKER, container_toolkit_gpu_injection="legacy")[LEGACY_TASKS[0]].active


def test_the_model_server_asks_for_the_gpu_the_same_way() -> None:
    play = next(play for play in load_playbook(SITE) if play.name == "model server")
    cases = (("20.10.24+dfsg1", ["--gpus", "all"]), (TRIXIE_DOCKER, ["--device", "nvidia.com/gpu=all"]))
    for version, request in cases:
        host_facts = facts(CONVERGED_DEBIAN12, docker_version=version).as_vars()
        variables = Renderer(make_environment(play.template_dirs), {**play.defaults, "facts": host_facts}).variables
        assert variables["vllm_docker_run_options"] == [*request, "--ipc=host"]


def spec_is_current(spec: Path, driver_version: str) -> bool:
    unless = render_tasks(facts(CONVERGED_DEBIAN12, docker_version=TRIXIE_DOCKER, driver_version=driver_version),
                          container_toolkit_cdi_spec=str(spec))["CDI spec for the running driver"].args.unless
    return subprocess.run(["bash", "-c", unless], check=False).returncode == 0


def test_the_cdi_spec_is_made_again_when_it_names_another_driver(tmp_path: Path) -> None:
    spec = tmp_path / "nvidia.yaml"
    assert not spec_is_current(spec, "999.88.77")  # none yet
    spec.write_text(GOLDEN_SPEC.read_text())  # NVIDIA's own expected output, mock driver 999.88.77
    assert spec_is_current(spec, "999.88.77")
    assert not spec_is_current(spec, "580.95.05")  # the driver was upgraded: a new spec


def test_the_cdi_spec_is_written_whole_or_not_at_all() -> None:
    rendered = render_tasks(facts(CONVERGED_DEBIAN12, docker_version=TRIXIE_DOCKER))
    cmd = rendered["CDI spec for the running driver"].args.cmd
    assert '--output="$spec.partial" && mv -f "$spec.partial" "$spec"' in cmd


def fake_tools(folder: Path, reload_loses_gpu: bool) -> dict[str, str]:
    """docker and systemctl that log their calls; after a reload `docker exec nvidia-smi` fails
    with the real words when `reload_loses_gpu` (as with the hook's devices under systemd)."""
    log = folder / "calls"
    (folder / "docker").write_text(
        "#!/bin/sh\n"
        f'echo "docker $*" >> {log}\n'
        f'if [ "$1" = exec ] && [ -e {folder}/reloaded ] && [ {int(reload_loses_gpu)} = 1 ]; then\n'
        '  echo "Failed to initialize NVML: Unknown Error"; exit 255; fi\n'
        'if [ "$1" = exec ]; then echo "GPU 0: NVIDIA GeForce RTX 5090 Laptop GPU (UUID: GPU-x)"; fi\n')
    (folder / "systemctl").write_text(f'#!/bin/sh\necho "systemctl $*" >> {log}\ntouch {folder}/reloaded\n')
    for tool in ("docker", "systemctl"):
        (folder / tool).chmod(0o755)
    return {"PATH": f"{folder}:{os.environ['PATH']}", "PROVISION_GPU_CHECK_STAMP": str(folder / "state/check.pass")}


def run_check(tmp_path: Path, reload_loses_gpu: bool, *options: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(CHECK_SCRIPT), "check:1", *(options or ("--gpus", "all"))],
                          env={**fake_tools(tmp_path, reload_loses_gpu), **env}, capture_output=True, text=True,
                          check=False)


def test_the_check_asks_the_running_container_again_after_a_daemon_reload(tmp_path: Path) -> None:
    result = run_check(tmp_path, reload_loses_gpu=False)
    assert result.returncode == 0, result.stderr
    calls = (tmp_path / "calls").read_text().splitlines()
    name = calls[0].split("--name ")[1].split()[0]
    assert calls == [f"docker run -d --name {name} --gpus all --entrypoint sleep -- check:1 300",
                     f"docker exec {name} nvidia-smi -L", "systemctl daemon-reload",
                     f"docker exec {name} nvidia-smi -L", f"docker rm -f {name}"]
    assert result.stdout.splitlines()[1] == "after systemctl daemon-reload:"


def test_the_check_fails_when_the_container_lost_the_gpu_at_the_reload(tmp_path: Path) -> None:
    result = run_check(tmp_path, reload_loses_gpu=True)
    assert result.returncode == 255
    assert result.stdout.splitlines()[-1] == "Failed to initialize NVML: Unknown Error"
    assert (tmp_path / "calls").read_text().splitlines()[-1].startswith("docker rm -f ")


def test_a_pass_holds_until_the_stack_it_was_made_on_changes(tmp_path: Path) -> None:
    """A converged rerun starts no container: the same digest of boot, driver, toolkit, docker and
    settings prints the recorded pass; another request (or PROVISION_GPU_CHECK_AGAIN) checks again."""
    first = run_check(tmp_path, reload_loses_gpu=False)
    assert first.returncode == 0 and (tmp_path / "state/check.pass").exists()
    calls = (tmp_path / "calls").read_text()
    again = run_check(tmp_path, reload_loses_gpu=False)
    assert again.returncode == 0 and (tmp_path / "calls").read_text() == calls  # nothing started
    header = "passed earlier on this boot, nothing it depends on changed: "
    assert again.stdout.splitlines() == [header + first.stdout.splitlines()[0], *first.stdout.splitlines()[1:]]
    run_check(tmp_path, False, "--device", "nvidia.com/gpu=all")
    assert (tmp_path / "calls").read_text().count("docker run") == 2  # other options: another stack
    run_check(tmp_path, False, "--device", "nvidia.com/gpu=all", PROVISION_GPU_CHECK_AGAIN="1")
    assert (tmp_path / "calls").read_text().count("docker run") == 3


def test_a_failed_check_forgets_the_pass(tmp_path: Path) -> None:
    assert run_check(tmp_path, reload_loses_gpu=False).returncode == 0
    (tmp_path / "reloaded").unlink()
    assert run_check(tmp_path, True, PROVISION_GPU_CHECK_AGAIN="1").returncode == 255
    assert not (tmp_path / "state/check.pass").exists()
    assert run_check(tmp_path, reload_loses_gpu=True).returncode == 255  # no pass left to read

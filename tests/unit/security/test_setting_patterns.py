"""Every setting typed to its target (issue 19): a string setting never holds a control character,
and versions, URLs, package names, images, paths and names match the format their role declares
(`format:` in meta/argument_specs.yaml, provision/settings/formats.py). Refused by the settings
check, before any host is contacted: exit 2, `file:line: key:`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from provision.errors import InputError
from provision.settings import load_specs
from provision.settings.check import check_value
from tests.unit.test_cli_input_errors import listener, provision
from tests.unit.test_settings_corpus import HOST, write

__all__ = ["listener"]
ROLES = Path(__file__).resolve().parents[3] / "roles"
APT_CONF_INJECTION = 'x"; }; APT::Update::Pre-Invoke {"touch /tmp/pwned";}; Dummy { "'

# setting -> hostile values the settings check refuses
HOSTILE: dict[str, list[Any]] = {
    "cuda_toolkit_version": ['12.9"; touch /tmp/pwned; "', "12.9\ntouch /tmp/pwned", "$(touch /tmp/pwned)", "-x"],
    "cuda_toolkit_package": ["cuda-toolkit-12-9 --allow-unauthenticated", "-oAPT::Get::AllowUnauthenticated=1"],
    "nvidia_unattended_upgrades_blacklist": [[APT_CONF_INJECTION], ["libcuda\\"]],
    "nvidia_container_repo_base": ["https://mirror.lan/x\nTrusted: yes", "-K/etc/shadow", "https://a b",
                                   "https://mirror.lan/x;include /etc/shadow"],
    "docker_repo_url": ["--config=/etc/shadow", "https://mirror.lan/docker\r\nTrusted: yes"],
    "nvidia_cuda_repo_base": ["https://x'$(touch /tmp/pwned)'"],
    "hf_endpoint": ["http://cache.lan\nhttp://evil", "file:///x;y"],
    "office_cache_hf_upstream": ["https://hub/$host"],
    # written into nginx's config (registry-fill.nginx.conf.j2) as the hub's is
    "office_cache_registry_upstream": ["https://registry-1.docker.io;include /etc/shadow", "https://r/$host",
                                       "https://r\nstorage: {delete: x}"],
    "vllm_extra_flags": [{"chat-template": "x\nExecStartPost=/bin/touch /tmp/pwned"}, {"served-model-name": "a\x00b"}],
    "vllm_image": ["vllm/vllm-openai:v1 --privileged", "--privileged", "img\n"],
    "hf_model": ["../../etc", "org/name --trust-remote-code"],
    "hf_revision": ["main\nrm -rf /", "-x"],
    "served_model_name": ["x%i", "a b", "\x1b]0;pwned\x07"],
    "vllm_service_name": ["vllm; touch /tmp/pwned", "../x"],
    "vllm_bind_address": ["0.0.0.0 -v /:/host", "127.0.0.1\n"],
    "nvidia_driver_pin_packages": [["nvidia-*\nPin-Priority: 1001"], ["nvidia-* libc6"]],
    "nvidia_driver_version": ["580.95.05\nPackage: *", "-1"],
    "nvidia_modules_load": [["nvidia\nevil"]],
    "host_tuning_logind_settings": [{"HandleLidSwitch": "ignore\nKillUserProcesses=yes"},
                                    {"HandleLidSwitch=ignore\nKillUserProcesses": "yes"}],
    "host_tuning_sleep_targets": [["sleep.target; reboot"]],
    "office_cache_hf_max_size": ["200g; include /etc/shadow"],
    "office_cache_registry_fill_max_size": ["50g inactive=1s"],
    "office_cache_registry_fill_dir": ["/var/cache/x levels=1:2 keys_zone=evil:1m"],
    "office_cache_hf_cache_dir": ["/var/cache/x levels=1:2 keys_zone=evil:1m"],
    "docker_insecure_registries": [["registry.lan:5000\nevil"]],
    "hf_token": ["hf_abc\nAuthorization: x", 'hf_abc" -o /etc/cron.d/x'],
    "vllm_api_key": ["key with spaces", "k\\\"ey"],
    "vllm_docker_run_options": [["--env", "A=\x1b[2J"]],
}

# setting -> values of the same settings a user may well write, which pass
ORDINARY: dict[str, list[Any]] = {
    "cuda_toolkit_version": ["12.9", "13.0"],
    "nvidia_driver_version": ["", "580.95.05", "1:580.95.05-0ubuntu1"],
    "nvidia_container_repo_base": ["https://nvidia.github.io/libnvidia-container", "http://10.0.0.5:3142/x"],
    "hf_endpoint": ["https://huggingface.co", "file:///var/lib/provision/bundle/hub"],
    "vllm_image": ["vllm/vllm-openai:v0.21.0-cu129", "10.0.2.2:5000/vllm/vllm-openai@sha256:" + "a" * 64],
    "hf_revision": ["main", "v1.0", "a" * 40, "refs/pr/3"],
    "vllm_bind_address": ["", "127.0.0.1", "::1", "gpu-1.office.lan"],
    "nvidia_driver_pin_packages": [["nvidia-*", "libcuda*"]],
    "nvidia_unattended_upgrades_blacklist": [["nvidia-(?!container-)", "cuda-"]],
    "vllm_extra_flags": [{"chat-template": "{% for m in messages %}{{ m.content }}{% endfor %}"}],
    "served_model_name": ["gemma-4-26b-a4b-it", "team@office"],
    "office_cache_hf_max_size": ["200g", "1024"],
    "office_cache_registry_upstream": ["https://registry-1.docker.io", "http://10.0.2.2:5000"],
    "hf_token": ["", "hf_AbCdEf0123456789"],
    "vllm_api_key": ["", "sk-office-2026_x.y"],
}


@pytest.fixture(scope="module")
def specs() -> Any:
    return load_specs([ROLES])


@pytest.mark.parametrize(("name", "value"), [(n, v) for n, values in HOSTILE.items() for v in values],
                         ids=lambda v: repr(v)[:40])
def test_a_hostile_setting_is_refused_by_the_settings_check(specs: Any, name: str, value: Any) -> None:
    problem = check_value(specs.get(name), value, {})
    assert problem is not None
    assert name not in ("hf_token", "vllm_api_key") or value not in problem  # a secret is never shown
    assert "\n" not in problem and "\x1b" not in problem and "\x00" not in problem  # shown escaped


@pytest.mark.parametrize(("name", "value"), [(n, v) for n, values in ORDINARY.items() for v in values],
                         ids=lambda v: repr(v)[:40])
def test_an_ordinary_setting_still_passes(specs: Any, name: str, value: Any) -> None:
    assert check_value(specs.get(name), value, {}) is None


def test_a_secret_with_a_control_character_is_refused_without_showing_it(specs: Any) -> None:
    problem = check_value(specs.get("hf_token"), "hf_secret_value\n", {})
    assert problem and "control character '\\n'" in problem and "hf_secret_value" not in problem


@pytest.mark.parametrize(("setting", "key"), [
    (f"cuda_toolkit_version: {json.dumps('12.9; touch /tmp/pwned')}", "cuda_toolkit_version"),
    (f"nvidia_unattended_upgrades_blacklist: [{json.dumps(APT_CONF_INJECTION)}]",
     "nvidia_unattended_upgrades_blacklist"),
    (f"docker_repo_url: {json.dumps('https://mirror.lan/docker' + chr(10) + 'Trusted: yes')}", "docker_repo_url"),
    (f"vllm_extra_flags: {{chat-template: {json.dumps('x' + chr(10) + 'ExecStartPost=/bin/touch /tmp/pwned')}}}",
     "vllm_extra_flags"),
])
def test_the_check_names_file_line_key_and_contacts_no_host(tmp_path: Path, listener: Any, setting: str,
                                                            key: str) -> None:
    port, connections = listener
    inventory = write(tmp_path, HOST, setting, port)
    done = provision("up", str(inventory), "--check")
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"{inventory}:5: {key}: " in done.stderr
    assert "Traceback" not in done.stderr and connections == []


def test_an_extra_var_with_a_line_break_is_named_as_such(tmp_path: Path, listener: Any) -> None:
    port, connections = listener
    inventory = write(tmp_path, HOST, "max_num_seqs: 4", port)
    done = provision("up", str(inventory), "--check", "-e",
                     json.dumps({"served_model_name": "a\nExecStartPost=/bin/true"}))
    assert done.returncode == 2, done.stdout + done.stderr
    assert "-e: served_model_name: holds the control character '\\n'" in done.stderr
    assert connections == []


def test_a_declaration_names_a_known_format(tmp_path: Path) -> None:
    (tmp_path / "a" / "meta").mkdir(parents=True)
    spec = tmp_path / "a" / "meta" / "argument_specs.yaml"
    spec.write_text("options:\n  x:\n    type: str\n    format: urll\n    description: d\n")
    with pytest.raises(InputError, match=r"unknown format 'urll'.*did you mean 'url'"):
        load_specs([tmp_path])

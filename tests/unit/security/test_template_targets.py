"""Every role template and the service unit rendered with hostile values (issue 19): the result parses
in its target's own syntax with the value intact as data, or the value is refused. The settings check
refuses these values first (test_setting_patterns.py); this is the second line, for values that
arrive rendered (a `{{ }}` setting, a derived variable, a bundle's release name).

Readers: bash (and the marker a value would create), apt-config for apt.conf, apt-get indextargets
and deb822(5) for sources and preferences, yaml/json for the registry configs, and for systemd units
systemd-analyze verify plus the systemd.syntax(7) reader of target_syntax.py."""

from __future__ import annotations

import json
import subprocess
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml

from provision.playbook.templating import TemplateError, make_environment
from provision.vllm.argv import serve_arguments
from provision.vllm.unit import ContainerUnit, render_unit
from tests.unit.ops_support import assert_bash_parses, make_args, plan
from tests.unit.security.target_syntax import (
    apt_config_dump,
    apt_sources_uris,
    read_stanza,
    read_unit,
    split_command,
    systemd_verify,
)
from tests.unit.test_ops_vllm import RELEASE_ARGS
from tests.unit.vllm_service_support import UNIT_SETTINGS

ROLES = Path(__file__).resolve().parents[3] / "roles"
TEMPLATES = sorted(ROLES.glob("*/templates/*"))
APT_CONF_INJECTION = 'x"; }; APT::Update::Pre-Invoke {"touch /tmp/pwned";}; Dummy { "'


def render(name: str, **variables: Any) -> str:
    env = make_environment(sorted({path.parent for path in TEMPLATES}))
    return env.get_template(name).render(**variables)


def shell_injections(marker: Path) -> list[str]:
    return [f"12.9'; touch {marker}; '", f"$(touch {marker})", f"`touch {marker}`", f'12.9"; touch {marker}; "',
            f"12.9\ntouch {marker}", "12.9 ${HOME} *"]


def test_cuda_profile_entry_keeps_any_version_as_data(tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    for version in shell_injections(marker):
        profile = tmp_path / "cuda.sh"
        profile.write_text(render("cuda.sh.j2", cuda_toolkit_version=version))
        assert_bash_parses(profile.read_text())
        done = subprocess.run(["sh", "-c", f". {profile}; printf '%s' \"$PATH\""], env={"PATH": "/usr/bin:/bin"},
                              capture_output=True, text=True, check=True)
        assert done.stdout == f"/usr/local/cuda-{version}/bin:/usr/bin:/bin", version
        assert not marker.exists(), version


BLACKLIST = "Unattended-Upgrade::Package-Blacklist::"


@pytest.mark.parametrize("pattern", [APT_CONF_INJECTION, 'a"b', "back\\slash", "line\nbreak"])
def test_an_unattended_upgrades_pattern_apt_cannot_hold_is_refused(pattern: str) -> None:
    with pytest.raises(TemplateError, match=r"apt\.conf"):
        render("nvidia-no-unattended-upgrades.j2", nvidia_driver_follows_kernel=False,
               nvidia_unattended_upgrades_blacklist=[pattern])


@pytest.mark.parametrize("pattern", [APT_CONF_INJECTION, "line\nbreak"])
def test_the_signed_paths_pattern_list_is_escaped_alike(pattern: str) -> None:
    with pytest.raises(TemplateError, match=r"apt\.conf"):
        render("nvidia-no-unattended-upgrades.j2", nvidia_driver_follows_kernel=True,
               nvidia_unattended_upgrades_blacklist_signed=[pattern], nvidia_unattended_upgrades_blacklist=[])


def test_a_container_repository_host_cannot_close_the_apt_conf_block() -> None:
    with pytest.raises(TemplateError, match=r"apt\.conf"):
        render("nvidia-no-unattended-upgrades.j2", nvidia_unattended_upgrades_blacklist=["cuda-"],
               nvidia_driver_follows_kernel=False,
               nvidia_container_repo_base='https://x";};APT::Update::Pre-Invoke{"touch /tmp/pwned";};Y{"/z')


def test_apt_reads_the_unattended_upgrades_patterns_back_as_given(tmp_path: Path) -> None:
    patterns = ["nvidia-(?!container-)", "x{;}y", "it's $HOME", "a // not a comment", "cuda-"]
    conf = tmp_path / "51provision"
    conf.write_text(render("nvidia-no-unattended-upgrades.j2", nvidia_unattended_upgrades_blacklist=patterns,
                           nvidia_driver_follows_kernel=False))
    dump = apt_config_dump(conf)
    assert [line for line in dump if line.startswith(BLACKLIST)] == [f'{BLACKLIST} "{p}";' for p in patterns]
    assert not [line for line in dump if "Pre-Invoke" in line and "pwned" in line]


PIN = {"nvidia_driver_source": "nvidia", "nvidia_driver_signed_modules": False, "facts": {"os": {"id": "ubuntu"}},
       "nvidia_driver_pin_packages": ["nvidia-*", "libcuda*"], "nvidia_driver_version": "",
       "nvidia_driver_branch": "580", "nvidia_cuda_repo_base": "https://developer.download.nvidia.com/compute/cuda/repos",
       "nvidia_driver_follows_kernel": False}


@pytest.mark.parametrize("changes", [
    {"nvidia_driver_version": "580.95.05\nPin-Priority: 1001\n\nPackage: *"},
    {"nvidia_driver_pin_packages": ["nvidia-*\nPin: release a=evil"]},
    {"nvidia_driver_pin_packages": ["nvidia-* libc6"]},
    {"nvidia_driver_source": "ubuntu", "nvidia_cuda_repo_base": "https://a\rPin-Priority: 1001/x"},
    {"nvidia_driver_follows_kernel": True, "nvidia_driver_pin_packages": ["nvidia-*\nPin: release a=evil"]},
    {"nvidia_driver_follows_kernel": True, "nvidia_driver_branch": "580\nPin-Priority: 1001"},
])
def test_a_driver_pin_value_that_would_add_a_field_is_refused(changes: dict[str, Any]) -> None:
    with pytest.raises(TemplateError, match="deb822"):
        render("nvidia-driver.pref.j2", **{**PIN, **changes})


def test_the_driver_pin_reads_back_with_its_values() -> None:
    text = render("nvidia-driver.pref.j2", **{**PIN, "nvidia_driver_version": "1:580.95.05-0ubuntu1"})
    stanzas = [read_stanza(block) for block in text.split("\n\n") if "Package:" in block]
    assert [s["Pin"] for s in stanzas] == ["release o=Ubuntu", "version 1:580.95.05-0ubuntu1-*"]
    assert all(s["Package"] == "nvidia-* libcuda*" and set(s) == {"Package", "Pin", "Pin-Priority"} for s in stanzas)


@pytest.mark.parametrize(("name", "key", "variables"), [
    ("seed-registry-config.yml.j2", ("storage", "filesystem", "rootdirectory"),
     {"office_cache_seed_registry_port": 5001, "office_cache_seed_registry_dir": "/srv/a: b\n  evil: 1"}),
])
def test_the_registry_configs_hold_a_hostile_value_as_one_string(name: str, key: tuple[str, ...],
                                                                 variables: dict[str, Any]) -> None:
    config: Any = yaml.safe_load(render(name, **variables))
    for part in key:
        config = config[part]
    assert config == next(v for v in variables.values() if isinstance(v, str))


def test_the_office_cache_apt_conf_holds_only_a_proxy_url(tmp_path: Path) -> None:
    """The client's apt.conf (roles/office_cache_client/tasks.yaml) is written through apt_conf_string."""
    text = (ROLES / "office_cache_client" / "tasks.yaml").read_text()
    block = textwrap.dedent(text.split("content: |\n", 1)[1].split("    mode:", 1)[0])
    env = make_environment()
    with pytest.raises(TemplateError, match=r"apt\.conf"):
        env.from_string(block).render(office_cache_apt_url='http://c";Acquire::http::Proxy "http://evil',
                                      office_cache_proxy_detect="/usr/local/sbin/x")
    conf = tmp_path / "01provision-office-cache"
    conf.write_text(env.from_string(block).render(office_cache_apt_url="http://10.0.0.5:3142",
                                                  office_cache_proxy_detect="/usr/local/sbin/x"))
    assert 'Provision::OfficeCache::Proxy "http://10.0.0.5:3142";' in apt_config_dump(conf)


def test_the_bundle_source_takes_a_release_read_from_the_host_as_one_word(tmp_path: Path) -> None:
    """`bundle_host.release` comes from the host's facts: a line break or space in it is refused."""
    text = (ROLES / "offline_bundle" / "tasks.yaml").read_text()
    block = textwrap.dedent(text.split("bundle.sources\n    content: |\n", 1)[1].split("    mode:", 1)[0])
    env = make_environment()
    for release in ("debian-bookworm\nTrusted: yes", "debian-bookworm http://evil/"):
        with pytest.raises(TemplateError, match="deb822"):
            env.from_string(block).render(bundle_apt_url="file:/srv/b", bundle_host={"release": release})
    sources = tmp_path / "bundle.sources"
    sources.write_text(env.from_string(block).render(bundle_apt_url="file:/srv/b",
                                                     bundle_host={"release": "debian-bookworm"}))
    assert apt_sources_uris(sources, tmp_path) == ["file:/srv/b/apt/debian-bookworm/"]


HOSTILE_FLAGS = {
    "chat-template": "x\nExecStartPost=/bin/touch /tmp/pwned",
    "served-model-name": ["a b", "it's", "%h", "$HOME", "\x1b[2J", "#hash", "; rm -rf /", "back\\slash\\"],
    "override-generation-config": {"k": "v\r\n[Service]\nUser=root"},
}


def test_the_vllm_unit_keeps_hostile_flag_values_as_arguments(tmp_path: Path) -> None:
    unit = ContainerUnit(name="vllm", description="vLLM serving gemma (org/model)", image="vllm/vllm-openai:v1",
                         arguments=serve_arguments("org/model", HOSTILE_FLAGS), **UNIT_SETTINGS)
    text = render_unit(unit)
    settings = read_unit(text)
    assert [(s, k) for s, k, _ in settings] == [
        ("Unit", "Description"), ("Unit", "After"), ("Unit", "Requires"), ("Unit", "Wants"),
        ("Unit", "StartLimitIntervalSec"), ("Unit", "StartLimitBurst"), ("Service", "Type"), ("Service", "Restart"),
        ("Service", "RestartSec"), ("Service", "TimeoutStartSec"), ("Service", "TimeoutStopSec"),
        ("Service", "ExecStartPre"), ("Service", "ExecStart"), ("Service", "ExecStop"), ("Install", "WantedBy")]
    exec_start = next(value for _, key, value in settings if key == "ExecStart")
    assert split_command(exec_start) == unit.run_argv()
    path = tmp_path / "vllm.service"
    path.write_text(text)
    systemd_verify(path)


@pytest.mark.parametrize("image", ["--privileged", "-v/:/host", "vllm/vllm-openai:v1 --privileged"])
def test_the_vllm_image_is_never_a_docker_run_option(image: str) -> None:
    """The unit's argv has no `--` before the image (adding one would change every running unit)."""
    for field in ("image", "image_pinned"):
        with pytest.raises(ValueError, match="not an image reference"):
            make_args("vllm_release", **{**RELEASE_ARGS, field: image})


@pytest.mark.parametrize("description", ["vLLM serving a\nExecStartPre=/bin/touch /tmp/pwned", "trailing \\",
                                         "esc \x1b[2J"])
def test_a_unit_description_that_would_add_a_line_is_refused(description: str) -> None:
    with pytest.raises(ValueError, match="systemd"):
        render_unit(ContainerUnit(name="vllm", description=description, image="i:1", arguments=["org/m"],
                                  **UNIT_SETTINGS))


def test_a_unit_description_keeps_percent_as_data() -> None:
    text = render_unit(ContainerUnit(name="vllm", description="serving 100%i (x)", image="i:1", arguments=["org/m"],
                                  **UNIT_SETTINGS))
    assert "Description=serving 100%%i (x)" in text.splitlines()


def test_daemon_json_holds_hostile_strings_as_json() -> None:
    data = {"registry-mirrors": ['http://a"}, "hosts": ["tcp://0.0.0.0:2375"], "x": {"'], "log-opts": {"k": "\n\x00"}}
    result = plan("json_merge", "type=absent\n", path="/etc/docker/daemon.json", data=data)
    payloads = [command.data for command in result.commands if command.data]
    assert payloads and json.loads(payloads[0]) == data


@pytest.mark.parametrize("name", ["hf-mirror.nginx.conf.j2", "registry-fill.nginx.conf.j2"])
def test_the_cache_hosts_resolver_is_written_only_as_an_address(name: str) -> None:
    """The resolver is what the cache host's /etc/resolv.conf names (host data): an address is kept,
    IPv6 in brackets as nginx reads it; anything else (a `;` would start another directive) is refused."""
    settings = yaml.safe_load((ROLES / "office_cache" / "defaults.yaml").read_text())
    for output, written in [("10.0.2.3", "10.0.2.3"), ("[fd00::53]", "[fd00::53]")]:
        text = render(name, office_cache_dns={"output": output}, **settings)
        assert f"resolver {written} ipv6=off;" in text
    for hostile in ["10.0.2.3;include/etc/shadow", "10.0.2.3 valid=1s", "dns.lan"]:
        with pytest.raises(TemplateError, match="not an IP address"):
            render(name, office_cache_dns={"output": hostile}, **settings)


def test_every_template_is_covered_here() -> None:
    """A new template must be added to this file (or named here as holding no setting)."""
    tested = {"cuda.sh.j2", "nvidia-no-unattended-upgrades.j2", "nvidia-driver.pref.j2", "seed-registry-config.yml.j2",
              "hf-mirror.nginx.conf.j2", "registry-fill.nginx.conf.j2"}
    no_strings = {  # constant files, or only integers and values of a declared `format:` (names, paths)
        "nvidia-dev-char-symlinks.service.j2", "gpu-in-container-check.sh", "logind-provision.conf.j2",
        "nvidia-persistenced-provision.conf.j2", "blacklist-nouveau.conf.j2", "modules-load-nvidia.conf.j2",
        "apt-cacher-ng.conf.j2", "provision-seed-registry.service.j2", "seed-registry.sh",
        "apt-proxy-detect.sh",
        # the office cache's registry: ports; its upstream (`format: url`) goes to nginx, not to the YAML
        "registry-config.yml.j2",
        # office_gateway: addresses of `format: host`, ints; haproxy -c reads it (test_roles_office_gateway.py)
        "haproxy.cfg.j2",
        # office users' keys and names: checked by provision/office_gateway/users.py (test_office_gateway_users.py)
        "office-users.map.j2",
        # office_metrics: paths, ints and a choice; the scrape config is YAML dumped by
        # provision/office_metrics/targets.py, which checks every address (test_roles_office_metrics.py)
        "gpu-metrics.sh", "prometheus.default.j2", "prometheus.yml.j2", "provision-gpu-metrics.service.j2",
        "provision-gpu-metrics.timer.j2",
        # its reload drop-in: two paths of `format: plain_path` (letters, digits, . _ / @ + -)
        "haproxy-keep-server-state.conf.j2"}
    assert {path.name for path in TEMPLATES} == tested | no_strings

"""The office gateway (roles/office_gateway) planned from an inventory: HAProxy's config has every GPU
host as a server with its address, vLLM port and max_num_seqs, the health, retry, queue and streaming
settings; the real `haproxy -c` accepts it; hostile values are refused before anything is written."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from provision.cli.main import main
from provision.inventory.loader import load_inventory
from provision.office_gateway.admin import parse_view
from provision.office_gateway.backends import BackendError, backends
from provision.ops.scripting import atomic_write_script
from provision.playbook.loader import load_playbook
from provision.playbook.templating import Renderer, make_environment
from provision.runner.runner import RunConfig, Runner
from provision.settings.variables import inventory_variables
from provision.status_page.page import LIVE, render_page
from tests.unit.test_roles_gpu_support import SITE, facts, render

STATUS_ROWS = Path(__file__).parent / "fixtures/status_page/status.json"

FRESH_DEBIAN = "debian12-rtx5090-standin-fresh.txt"
OFFICE = """all:
  hosts:
    desk-1: {ansible_host: 192.168.1.61}
    desk-2: {ansible_host: 192.168.1.62, vllm_port: 8001, max_num_seqs: 2}
  children:
    office_cache:
      hosts:
        nas: {ansible_host: 192.168.1.10}
    office_gateway:
      hosts:
        gw: {ansible_host: 192.168.1.5}
"""


def gateway_play():
    return next(play for play in load_playbook(SITE) if play.name == "office gateway")


def gateway_tasks(tmp_path: Path, text: str = OFFICE, **overrides: object) -> dict[str, object]:
    path = tmp_path / "office.yaml"
    path.write_text(text)
    play = gateway_play()
    variables = {**play.defaults, **inventory_variables(load_inventory(path)), "facts": facts(FRESH_DEBIAN).as_vars(),
                 "inventory_hostname": "gw", "notified_handlers": [], "office_gateway_reload_unit": {"changed": False},
                 **overrides}
    render_with = Renderer(make_environment(play.template_dirs), variables)
    return {task.name: render(task, render_with) for task in play.tasks}


def haproxy_config(tmp_path: Path, text: str = OFFICE, **overrides: object) -> str:
    return gateway_tasks(tmp_path, text, **overrides)["haproxy routes the office endpoint to the fleet"].args.content


def local_haproxy_config(tmp_path: Path, inventory: str, port: int, **overrides: object) -> Path:
    """The role's haproxy.cfg for `inventory`, made runnable by an unprivileged HAProxy on this machine
    (`haproxy -db -f PATH`): listening on 127.0.0.1:port, its socket, server state and status page
    under tmp_path (the files the role's tasks write first), no chroot, syslog or daemon mode."""
    from tests.standins.vllm.launch import free_port

    (tmp_path / "server-state").write_text("1\n")  # what the role's task writes until a reload saves one
    (tmp_path / "index.html").write_text("<!doctype html><title>office status</title>")  # what /status answers
    config = haproxy_config(tmp_path, inventory, office_gateway_port=port, office_gateway_bind_address="127.0.0.1",
                            office_gateway_admin_socket=str(tmp_path / "admin.sock"),
                            office_gateway_server_state_file=str(tmp_path / "server-state"),
                            office_gateway_status_page=str(tmp_path / "index.html"),
                            office_metrics_haproxy_port=free_port(), **overrides)
    path = tmp_path / "haproxy.cfg"
    path.write_text(config.replace("chroot /var/lib/haproxy", f"chroot {tmp_path}")
                    .replace("    log /dev/log local0\n", "").replace("    daemon\n", ""))
    return path


def test_every_gpu_host_is_a_server_with_its_port_and_max_num_seqs(tmp_path: Path) -> None:
    config = haproxy_config(tmp_path)
    servers = re.findall(r"^\s+server (\S+) (\S+) maxconn (\d+) maxqueue (\d+)$", config, re.MULTILINE)
    # the profile's max_num_seqs where the host sets none; not the cache, not the gateway
    assert servers == [("desk-1", "192.168.1.61:8000", "4", "10000"), ("desk-2", "192.168.1.62:8001", "2", "10000")]
    assert "bind :8000" in config


def test_health_retries_queue_and_streaming_are_configured(tmp_path: Path) -> None:
    config = haproxy_config(tmp_path, office_gateway_queue_timeout_s=30)
    for line in ("balance leastconn", "http-check send meth GET uri /health", "http-check expect status 200",
                 "option redispatch 1", "retry-on conn-failure empty-response", "timeout queue 30s",
                 "timeout server 3600s", "timeout client 3600s", "option http-no-delay"):
        assert f"    {line}\n" in config, line
    assert ("default-server check inter 500ms fastinter 100ms fall 2 rise 2 observe layer4 error-limit 1"
            " on-error sudden-death" in config)
    error = next(line for line in config.splitlines() if line.strip().startswith("http-error status 503"))
    assert error.endswith("hdr Retry-After 5")
    assert "stats socket /run/haproxy/admin.sock mode 600 level admin" in config


def test_the_config_is_checked_by_haproxy_before_it_replaces_the_live_one_and_reloaded(tmp_path: Path) -> None:
    tasks = gateway_tasks(tmp_path)
    write = tasks["haproxy routes the office endpoint to the fleet"]
    assert write.args.validate_with == ["/usr/sbin/haproxy", "-c", "-q", "-f"]
    assert write.task.notify == ["reload haproxy"]
    handler = next(task for task in gateway_play().handlers if task.name == "reload haproxy")
    assert handler.args["state"] == "reloaded"  # a reload: the master-worker's old workers finish their requests


def test_a_refused_config_leaves_the_live_file_as_it_was(tmp_path: Path) -> None:
    live = tmp_path / "app.conf"
    live.write_text("good\n")
    script = atomic_write_script(str(live), mode="0644", owner_group=None, create_parent=False,
                                 validate=["grep", "-q", "good"])
    for content, accepted in ((b"bad\n", False), (b"good, new\n", True)):
        done = subprocess.run(["bash", "-c", f"exec 3<&0\n{script}"], input=content, capture_output=True, check=False)
        assert (done.returncode == 0) is accepted, done.stderr
        assert live.read_bytes() == (content if accepted else b"good\n")
    assert not list(tmp_path.glob(".app.conf.provision-*"))  # no temporary file left behind


@pytest.mark.skipif(shutil.which("haproxy") is None, reason="needs haproxy (apt-get install haproxy)")
def test_haproxy_itself_accepts_the_rendered_config(tmp_path: Path) -> None:
    config = tmp_path / "haproxy.cfg"
    page = tmp_path / "index.html"  # the live status page, as `up` publishes it (~70 kB: tune.bufsize)
    page.write_text(render_page(json.loads(STATUS_ROWS.read_text()), live=LIVE))
    # the chroot and the socket's folder exist on the gateway (the haproxy package makes them)
    text = haproxy_config(tmp_path, office_gateway_status_page=str(page))
    text = text.replace("chroot /var/lib/haproxy", f"chroot {tmp_path}")
    (tmp_path / "server-state").write_text("1\n")  # what the role's task writes until a reload saves one
    config.write_text(text.replace("/run/haproxy/admin.sock", str(tmp_path / "admin.sock"))
                      .replace("/var/lib/haproxy/server-state", str(tmp_path / "server-state")))
    done = subprocess.run(["haproxy", "-c", "-f", str(config)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ALERT" not in done.stdout + done.stderr and "WARNING" not in done.stdout + done.stderr, done.stderr


@pytest.mark.parametrize("address", ["192.168.1.61\n    server evil 10.0.0.1:80", "desk 1", "#x", ""])
def test_a_hostile_backend_address_is_refused_by_the_settings_check(tmp_path: Path, capsys, address: str) -> None:
    path = tmp_path / "office.yaml"
    hostile = f"office_gateway_backend_address: {address!r}".replace("'", '"').replace("\n", "\\n")
    path.write_text(OFFICE.replace("desk-1: {ansible_host: 192.168.1.61}",
                                   f"desk-1: {{ansible_host: 192.168.1.61, {hostile}}}"))
    assert main(["vars", str(path), "--host", "desk-1"]) == 2
    error = capsys.readouterr().err
    # a line break is refused by the rule every string setting obeys, before its format is read
    why = "control character" if "\n" in address else "expected a host name or IP address"
    assert f"{path}:3: office_gateway_backend_address: " in error and why in error, error


def test_a_hostile_value_of_an_unselected_host_is_refused_when_the_config_is_built() -> None:
    groups = {"all": ["desk-1", "gw"], "office_gateway": ["gw"]}
    for own, message in (({"address": "10.0.0.1", "office_gateway_backend_address": "a b"},
                          "host desk-1: office_gateway_backend_address must be a host name or IP address"),
                         ({"address": "10.0.0.1", "vllm_port": "80\n"}, "host desk-1: office_gateway_backend_port"),
                         ({"address": "10.0.0.1", "max_num_seqs": 0}, "host desk-1: max_num_seqs")):
        with pytest.raises(BackendError, match=message):
            backends(groups, {"desk-1": own, "gw": {}}, cache_group="office_cache", gateway_group="office_gateway",
                     default_port=8000, default_max_requests=4)


def test_a_gpu_laptop_can_be_the_gateway_and_a_backend(tmp_path: Path) -> None:
    text = OFFICE.replace("gw: {ansible_host: 192.168.1.5}",
                          "gw: {ansible_host: 192.168.1.5, office_gateway_backend: true}")
    vllm = haproxy_config(tmp_path, text, office_gateway_port=9000).split("\nbackend prometheus")[0]
    servers = re.findall(r"^\s+server (\S+) ", vllm, re.MULTILINE)
    assert servers == ["desk-1", "desk-2", "gw"]


def test_the_gateway_play_runs_on_no_host_without_the_group(tmp_path: Path) -> None:
    path = tmp_path / "office.yaml"
    path.write_text(OFFICE.replace("    office_gateway:\n      hosts:\n        gw: {ansible_host: 192.168.1.5}\n", ""))
    assert Runner(load_inventory(path), RunConfig(), reporter=None).play_hosts(gateway_play()) == set()  # type: ignore[arg-type]


def test_drain_refuses_a_host_that_is_not_a_backend_before_connecting(tmp_path: Path, capsys) -> None:
    path = tmp_path / "office.yaml"
    path.write_text(OFFICE)
    assert main(["drain", str(path), "nas"]) == 2  # the office cache is no backend
    assert "'nas' is not a backend of the office gateway gw; its backends: desk-1, desk-2" in capsys.readouterr().err
    path.write_text(OFFICE.replace("    office_gateway:\n      hosts:\n        gw: {ansible_host: 192.168.1.5}\n", ""))
    assert main(["undrain", str(path), "desk-1"]) == 2
    assert "the inventory has no host in the 'office_gateway' group" in capsys.readouterr().err


def test_the_gateways_view_is_read_from_haproxy_show_stat() -> None:
    # what admin.sh printed after `drain desk-1` on HAProxy 2.6.12-1+deb12u4 (Debian 12) in front of the
    # stand-in servers of tests/unit/test_office_gateway_haproxy.py, three requests served (whole CSV kept)
    recorded = (Path(__file__).parent / "fixtures/haproxy/show-stat-2.6.12-drained.txt").read_text()
    servers, in_flight = parse_view(recorded)
    assert in_flight == 0
    assert [(s.name, s.status, s.in_flight, s.queued, s.served, s.check) for s in servers] == [
        ("desk-1", "DRAIN", 0, 0, 1, "L7OK"), ("desk-2", "UP", 0, 0, 2, "L7OK")]


GPU_ROLES = {"preflight", "plan", "nvidia_driver", "cuda_toolkit", "docker", "container_toolkit", "host_tuning",
             "model", "vllm", "smoke"}


def test_the_whole_site_runs_the_gpu_roles_on_the_gpu_hosts_only(tmp_path: Path) -> None:
    """`provision up office.yaml`: the gateway and the office cache have no GPU (preflight stopped them
    before, so an office was converged only with --limit); a GPU laptop that is also the gateway gets them."""
    plays = [play for play in load_playbook(SITE) if play.name in ("GPU inference host", "model server")]
    gated = {task.role for play in plays for task in play.tasks
             if isinstance(task.when, list) and task.when[0] == "office_gateway_backend | bool"}
    assert gated == GPU_ROLES
    assert all(task.when[0] == "office_gateway_backend | bool" for play in plays for task in play.tasks  # type: ignore[index]
               if task.role in GPU_ROLES)
    both = OFFICE.replace("gw: {ansible_host: 192.168.1.5}",
                          "gw: {ansible_host: 192.168.1.5, office_gateway_backend: true}")
    for text, host, runs in ((OFFICE, "desk-1", True), (OFFICE, "gw", False), (OFFICE, "nas", False),
                             (both, "gw", True)):
        path = tmp_path / "office.yaml"
        path.write_text(text)
        inventory = load_inventory(path)
        variables = {**plays[0].defaults, **inventory_variables(inventory), **inventory.hostvars[host],
                     "inventory_hostname": host}
        assert Renderer(make_environment([]), variables).condition("office_gateway_backend | bool") is runs, host

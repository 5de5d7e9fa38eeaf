"""The office's users and their keys (provision/office_gateway/users.py, keys.py), TLS with the user's
certificate and session stickiness (roles/office_gateway): the inventory's entries checked before any
host is contacted (exit 2 naming the key), generated keys kept 0600 on the controller and dropped with
their user, and the rendered config run by the real HAProxy 2.6 (Debian 12's, on this machine) in front
of two stand-in vLLM servers that check their own key (tests/standins/vllm, as vLLM's --api-key does):
no or a wrong key gets 401 with an OpenAI-style body and never reaches a backend; a user's key gets the
answer (so the backends got their own key); requests are counted per user; a session header keeps a
session on one backend; the endpoint serves TLS with the given certificate."""

from __future__ import annotations

import json
import shutil
import ssl
import stat
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from provision.cli.main import main
from provision.inventory.loader import load_inventory
from provision.office_gateway.admin import admin_script, parse_users, parse_view
from provision.office_gateway.keys import prepare
from provision.office_gateway.users import User, UsersError, backend_key, declared, generate, read_store, store_path
from provision.secrets import REDACTOR, Secret
from tests.standins.vllm.launch import free_port, start_standin
from tests.unit.serving_support import API_KEY, FAST, profile_arguments, stop
from tests.unit.test_roles_office_gateway import OFFICE, gateway_tasks

ALICE = "alice-key-0123456789abcdef"
FLEET = OFFICE.replace("all:\n", f"all:\n  vars:\n    vllm_api_key: !secret {API_KEY}\n", 1)
USERS_TEXT = "        gw: {ansible_host: 192.168.1.5}\n      vars:\n        office_users:\n" \
             f"          - {{name: alice, key: !secret {ALICE}}}\n          - {{name: bob}}\n"
MAP_TASK, CONFIG_TASK = "the office users' keys are the gateway's", "haproxy routes the office endpoint to the fleet"


@pytest.fixture(autouse=True)
def own_config_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The generated keys' file in a folder of the test's own; the controller cache too, as its key
    lives in the config folder (provision/controller_cache.py): the user's cache is left as it was."""
    home = tmp_path / "config"
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home))
    monkeypatch.setenv("PROVISION_CACHE_DIR", str(tmp_path / "cache"))
    return home


def inventory_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "office.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize(("raw", "message"), [
    ([{"name": "alice", "key": ALICE}], "office_users[0].key of alice must be `!secret VALUE` or `!env VARIABLE`"),
    ([{"name": "alice"}, {"name": "alice"}], "office_users[1].name 'alice' is listed twice"),
    ([{"name": "al ice"}], "office_users[0].name must be 1-64 letters"),
    ([{"name": "alice", "keys": "x"}], "office_users[0] must be a mapping with name and, optionally, key"),
    ([{"name": "alice", "key": Secret("short")}], "office_users[0].key of alice must be 16-256 characters"),
    ([{"name": "a", "key": Secret(ALICE)}, {"name": "b", "key": Secret(ALICE)}], "key of b is the key of another"),
    ({"alice": ALICE}, "office_users must be a list of users"),
])
def test_an_office_users_entry_the_gateway_cannot_take_is_refused(raw: Any, message: str) -> None:
    with pytest.raises(UsersError) as refused:
        declared(raw)
    assert message in str(refused.value)
    assert ALICE not in str(refused.value)


def test_a_generated_key_is_kept_0600_reused_and_dropped_with_its_user(own_config_home: Path) -> None:
    made = generate("gw", [User("alice", Secret(ALICE)), User("bob", None)])
    path = store_path("gw")
    assert list(made) == ["bob"] and len(made["bob"]) == 43 and path.parent.parent.parent == own_config_home
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert read_store(path) == made  # alice's own key is never written there
    assert REDACTOR(f"key {made['bob']}") == "key ***"
    assert generate("gw", [User("bob", None)]) == {}  # kept: shown once only
    assert generate("gw", []) == {} and read_store(path) == {}  # bob revoked: his key is gone
    assert generate("gw", [User("bob", None)])["bob"] != made["bob"]  # back again: a new key


def test_the_backends_must_share_one_key() -> None:
    groups = {"all": ["desk-1", "desk-2", "gw"], "office_gateway": ["gw"]}
    one = {"desk-1": {"address": "10.0.0.1", "vllm_api_key": Secret(API_KEY)},
           "desk-2": {"address": "10.0.0.2", "vllm_api_key": Secret(API_KEY)}, "gw": {}}
    assert backend_key(groups, one, cache_group="office_cache", gateway_group="office_gateway") == API_KEY
    for desk2, why in (({"address": "10.0.0.2", "vllm_api_key": Secret("sk-another-key-0123456789")}, "they differ"),
                       ({"address": "10.0.0.2"}, "desk-2 (none: generated per host)")):
        with pytest.raises(UsersError, match="office_users needs one vllm_api_key for every backend") as refused:
            backend_key(groups, {**one, "desk-2": desk2}, cache_group="office_cache", gateway_group="office_gateway")
        assert why in str(refused.value) and API_KEY not in str(refused.value)


@pytest.mark.parametrize(("text", "key", "message"), [
    (OFFICE.replace("        gw: {ansible_host: 192.168.1.5}\n", USERS_TEXT), "office_users",
     "office_users needs one vllm_api_key for every backend"),
    (FLEET.replace("        gw: {ansible_host: 192.168.1.5}\n", USERS_TEXT.replace(ALICE, API_KEY)), "office_users",
     "the key of alice is the backends' vllm_api_key"),
    (FLEET.replace("        gw: {ansible_host: 192.168.1.5}",
                   "        gw: {ansible_host: 192.168.1.5, office_gateway_tls_certificate: /nonexistent/cert.pem, "
                   "office_gateway_tls_key: /nonexistent/key.pem}"), "office_gateway_tls_certificate",
     "cannot read /nonexistent/cert.pem: No such file or directory"),
    (FLEET.replace("        gw: {ansible_host: 192.168.1.5}",
                   "        gw: {ansible_host: 192.168.1.5, office_gateway_tls_certificate: /etc/hostname}"),
     "office_gateway_tls_key", "office_gateway_tls_certificate is set, so office_gateway_tls_key must be too"),
    (FLEET.replace("        gw: {ansible_host: 192.168.1.5}",
                   "        gw: {ansible_host: 192.168.1.5, office_session_header: 'X-Id if TRUE'}"),
     "office_session_header", "expected an HTTP header name"),
])
def test_up_refuses_bad_gateway_input_before_contacting_any_host(tmp_path: Path, capsys, text: str, key: str,
                                                                 message: str) -> None:
    # the hosts' addresses are the documentation's (192.168.1.x here is unreachable): a contact would time out
    path = inventory_file(tmp_path, text)
    assert main(["up", str(path), "--connect-timeout", "1"]) == 2
    error = capsys.readouterr().err
    assert f"{path}" in error and f"{key}: " in error and message in error, error
    assert not store_path("gw").exists()


def test_a_check_run_generates_no_key_and_a_real_one_shows_it_once(tmp_path: Path) -> None:
    inventory = load_inventory(inventory_file(tmp_path, FLEET.replace("        gw: {ansible_host: 192.168.1.5}\n",
                                                                     USERS_TEXT)))
    assert prepare(inventory, inventory.hosts, {}, check=True) == {"gw": {}}
    assert not store_path("gw").exists()
    made = prepare(inventory, inventory.hosts, {}, check=False)
    assert list(made["gw"]) == ["bob"]
    assert prepare(inventory, inventory.hosts, {}, check=False) == {"gw": {}}


def users_tasks(tmp_path: Path, **overrides: object) -> dict[str, Any]:
    users = [{"name": "alice", "key": Secret(ALICE)}, {"name": "bob"}]
    return gateway_tasks(tmp_path, FLEET, office_users=users, **overrides)


def test_the_map_holds_each_users_key_and_the_config_none(tmp_path: Path) -> None:
    generated = generate("gw", [User("bob", None)])["bob"]
    tasks = users_tasks(tmp_path)
    assert tasks[MAP_TASK].args.content.splitlines()[-2:] == [f"{ALICE} alice", f"{generated} bob"]
    assert tasks[MAP_TASK].args.secret and tasks[MAP_TASK].args.mode == "0600"
    assert tasks["the gateway holds the backends' key"].args.content == f"backend {API_KEY}\n"
    config = tasks[CONFIG_TASK].args.content
    assert ALICE not in config and generated not in config and API_KEY not in config  # the config is 0644
    # the key rule applies to /v1 only: /status and the rest are outside it
    assert "    acl office_api path /v1\n    acl office_api path_beg /v1/\n" in config
    key_rules = config.split("# --- per-user keys")[1].split("# --- end of per-user keys")[0]
    assert all(line.rstrip().endswith("if office_api") or "if office_api " in line
               for line in key_rules.splitlines() if line.strip().startswith("http-request"))


def test_without_users_tls_or_a_session_header_the_config_has_none_of_them(tmp_path: Path) -> None:
    tasks = gateway_tasks(tmp_path, OFFICE)
    config = tasks[CONFIG_TASK].args.content
    assert "office_api" not in config and "stick" not in config and " ssl " not in config
    assert tasks[MAP_TASK].skipped and tasks["the gateway holds the backends' key"].skipped


def http(url: str, key: str | None, body: dict | None = None, headers: dict | None = None,
         context: ssl.SSLContext | None = None) -> tuple[int, str]:
    request = urllib.request.Request(url, data=json.dumps(body).encode() if body else None,
                                     headers={**({"Authorization": f"Bearer {key}"} if key else {}),
                                              "Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=60, context=context) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


CHAT = {"model": "workhorse", "max_tokens": 4, "messages": [{"role": "user", "content": "hello"}]}


@pytest.fixture()
def gateway(tmp_path: Path) -> Iterator[dict[str, Any]]:
    if shutil.which("haproxy") is None or shutil.which("socat") is None or shutil.which("openssl") is None:
        pytest.skip("needs haproxy, socat and openssl (apt-get install haproxy socat openssl)")
    certificate, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                    "-keyout", str(key), "-out", str(certificate), "-days", "2", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True)
    standins = {name: start_standin(profile_arguments(), env={**FAST, "VLLM_API_KEY": API_KEY})
                for name in ("desk-1", "desk-2")}
    port = free_port()
    text = FLEET.replace("desk-1: {ansible_host: 192.168.1.61}",
                         f"desk-1: {{ansible_host: 127.0.0.1, vllm_port: {standins['desk-1'].port}}}")
    text = text.replace("desk-2: {ansible_host: 192.168.1.62, vllm_port: 8001, max_num_seqs: 2}",
                        f"desk-2: {{ansible_host: 127.0.0.1, vllm_port: {standins['desk-2'].port}}}")
    bob = generate("gw", [User("bob", None)])["bob"]
    tasks = gateway_tasks(tmp_path, text, office_users=[{"name": "alice", "key": Secret(ALICE)}, {"name": "bob"}],
                          office_gateway_port=port, office_gateway_bind_address="127.0.0.1",
                          office_gateway_admin_socket=str(tmp_path / "admin.sock"),
                          office_gateway_users_map=str(tmp_path / "users.map"),
                          office_gateway_backend_key_map=str(tmp_path / "backend.map"),
                          office_gateway_tls_certificate=str(certificate), office_gateway_tls_key=str(key),
                          office_gateway_tls_file=str(tmp_path / "tls.pem"), office_session_header="X-Session-Id",
                          office_gateway_server_state_file=str(tmp_path / "server-state"),
                          office_gateway_status_page=str(tmp_path / "index.html"))
    (tmp_path / "server-state").write_text("1\n")
    (tmp_path / "index.html").write_text("<!doctype html><title>office status</title>")  # what /status answers
    for task in tasks.values():  # the files HAProxy reads (the systemd drop-in is not for this process)
        dest = getattr(task.args, "dest", None)
        if task.active and dest and str(dest).startswith(str(tmp_path)) and task.args.content is not None:
            content = task.args.content
            Path(task.args.dest).write_text(content.reveal() if isinstance(content, Secret) else content)
    config = tasks[CONFIG_TASK].args.content.replace("chroot /var/lib/haproxy", f"chroot {tmp_path}")
    (tmp_path / "haproxy.cfg").write_text(config.replace("    log /dev/log local0\n", "").replace("    daemon\n", ""))
    haproxy = subprocess.Popen(["haproxy", "-db", "-f", str(tmp_path / "haproxy.cfg")], stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE)
    trusted = ssl.create_default_context(cafile=str(certificate))
    try:
        for standin in standins.values():
            standin.wait_ready()
        yield {"url": f"https://127.0.0.1:{port}", "tls": trusted, "bob": bob, "socket": str(tmp_path / "admin.sock"),
               "haproxy": haproxy}
    finally:
        haproxy.terminate()
        haproxy.wait(timeout=10)
        for standin in standins.values():
            stop(standin)


def show(socket: str) -> str:
    done = subprocess.run(["bash", "-c", admin_script(socket, "show")], capture_output=True, text=True, timeout=30,
                          check=False)
    return done.stdout


def test_haproxy_refuses_unknown_keys_serves_users_counts_them_and_keeps_sessions(gateway) -> None:
    url, tls = gateway["url"], gateway["tls"]
    for _ in range(100):  # both servers up (checks every 500 ms, rise 2)
        servers = parse_view(show(gateway["socket"]))[0]
        if len(servers) == 2 and all(server.status == "UP" for server in servers):
            break
        subprocess.run(["sleep", "0.1"], check=True)
    for key in (None, "sk-not-a-users-key-0123", API_KEY):  # the backends' own key is not a user's
        status, body = http(f"{url}/v1/chat/completions", key, CHAT, context=tls)
        assert status == 401, body
        assert json.loads(body)["error"]["code"] == "invalid_api_key"
    assert sum(server.served for server in parse_view(show(gateway["socket"]))[0]) == 0  # none reached a backend
    assert http(f"{url}/health", None, context=tls)[0] == 200  # outside /v1: no key rule
    for key in (ALICE, gateway["bob"]):
        status, body = http(f"{url}/v1/chat/completions", key, CHAT, context=tls)
        assert status == 200 and json.loads(body)["object"] == "chat.completion", body  # the backend took its key
    # the scheme's name is case-insensitive (RFC 9110 11.1)
    assert http(f"{url}/v1/chat/completions", None, CHAT, headers={"Authorization": f"bearer {ALICE}"},
                context=tls)[0] == 200
    before = {server.name: server.served for server in parse_view(show(gateway["socket"]))[0]}
    for _ in range(6):
        assert http(f"{url}/v1/chat/completions", ALICE, CHAT, headers={"X-Session-Id": "s-1"}, context=tls)[0] == 200
    after = {server.name: server.served for server in parse_view(show(gateway["socket"]))[0]}
    assert sorted(after[name] - before[name] for name in after) == [0, 6]  # one session, one backend
    assert parse_users(show(gateway["socket"])) == {"alice": 8, "bob": 1}
    # HAProxy's drain still lets a stuck session in; admin.sh's drain forgets the server's sessions
    stuck = next(name for name in after if after[name] > before[name])
    drain = subprocess.run(["bash", "-c", admin_script(gateway["socket"], "drain", stuck, 5)], capture_output=True,
                           text=True, check=False)
    assert drain.returncode == 0, drain.stderr
    assert http(f"{url}/v1/chat/completions", ALICE, CHAT, headers={"X-Session-Id": "s-1"}, context=tls)[0] == 200
    drained = {server.name: server.served for server in parse_view(show(gateway["socket"]))[0]}
    assert drained[stuck] == after[stuck] and sum(drained.values()) == sum(after.values()) + 1
    with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):
        http(f"{url}/v1/models", ALICE, context=ssl.create_default_context())  # it is the given certificate


def test_requests_per_user_are_read_from_haproxy_show_table() -> None:
    # admin.sh's `show` on HAProxy 2.6.12-1+deb12u4 (Debian 12) after the requests of the test above
    recorded = (Path(__file__).parent / "fixtures/haproxy/show-table-office-users-2.6.12.txt").read_text()
    assert parse_users(recorded) == {"alice": 8, "bob": 1}
    assert parse_users("--- show table office_users\nNo such table name.\n--- show stat\n") == {}


def test_a_missing_map_entry_is_never_a_placeholder_key(tmp_path: Path) -> None:
    # a user whose key is not generated yet (a check run) is left out of the map, never given a stand-in key
    content = users_tasks(tmp_path)[MAP_TASK].args.content
    assert content.splitlines()[-1] == f"{ALICE} alice" and "bob" not in content


def test_with_a_certificate_the_endpoint_is_https_and_the_key_file_root_only(tmp_path: Path) -> None:
    (tmp_path / "c.pem").write_text("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
    (tmp_path / "k.pem").write_text("-----BEGIN PRIVATE KEY-----\nMIGH\n-----END PRIVATE KEY-----\n")
    tasks = gateway_tasks(tmp_path, OFFICE, office_gateway_tls_certificate=str(tmp_path / "c.pem"),
                          office_gateway_tls_key=str(tmp_path / "k.pem"))
    config = tasks[CONFIG_TASK].args.content
    assert "the office endpoint, https://192.168.1.5:8000/v1" in config.splitlines()[0]
    assert "    bind :8000 ssl crt /etc/haproxy/office-tls.pem\n" in config
    key = tasks["the office endpoint's TLS key"].args
    assert (key.dest, key.mode, key.owner, key.secret) == ("/etc/haproxy/office-tls.pem.key", "0600", "root", True)
    assert key.content == (tmp_path / "k.pem").read_text()
    assert tasks["no TLS key is left on the gateway"].skipped


def test_status_shows_requests_per_user_and_nothing_without_users() -> None:
    import io

    from rich.console import Console

    from provision.cli.gateway import users_table

    assert users_table("gw", {"users": {}}) is None
    console = Console(width=120, record=True, file=io.StringIO())
    console.print(users_table("gw", {"users": {"bob": 1, "alice": 8}}))
    text = console.export_text()
    assert "OFFICE USERS gw" in text and text.index("alice") < text.index("bob") and "8" in text

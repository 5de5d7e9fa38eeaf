"""Secrets leave no trace (issue 19, build item 3): every case here leaked on the code before it.

A secret is looked for in the form it takes where it would leak: base64 in a -vv trace (at each of
the three byte alignments a value can have inside a longer encoded file), JSON-escaped in a --json
document, shell-quoted in a command line, a short password; in `render --json`, in the run lock's
holder record on the host, and in the hub token's trips (plain http, a redirect to another host).
"""

from __future__ import annotations

import base64
import binascii
import http.server
import json
import stat
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from provision.cli.main import main
from provision.connection.base import CommandResult
from provision.connection.local import LocalConnection
from provision.connection.traced import TracedConnection
from provision.ops import REGISTRY
from provision.ops.hf_snapshot import HfSnapshotArgs, probe_script
from provision.runner.probe import ProbeCache
from provision.runner.results import HostResult, RunResult, Status, TaskResult
from provision.runner.run_lock import RunLock, RunLockHeld
from provision.secrets import REDACTOR, Secret
from provision.shell import quote
from tests.standins.hub.cli import start_hub

API_KEY = "sk-unit-Key_0123456789abcdefXYZ"


@pytest.fixture(autouse=True)
def forget_new_secrets() -> Iterator[None]:
    """Secrets registered by a test are forgotten after it: the redactor is the process's, and a
    1-character secret would mask that letter in every later test (a piece such as `secret` of a
    quoted one keeps every snippet holding that word out of the probe memory)."""
    kept = set(REDACTOR._values)
    yield
    REDACTOR._values.clear()
    REDACTOR._values.update(kept)
    REDACTOR._pattern = None


class Answers:
    """A connection that answers every script with `stdout`."""

    host_name = "lab1"
    round_trips = 0

    def __init__(self, stdout: str) -> None:
        self.stdout = stdout

    def run(self, script: str, **_: object) -> CommandResult:
        return CommandResult(self.stdout, "", 0)

    def close(self) -> None: ...


def traced(script: str, stdout: str = "") -> list[str]:
    said: list[str] = []
    TracedConnection(Answers(stdout), 2, said.append).run(script)
    return said


def decodes_to(text: str, secret: str) -> bool:
    """Whether any base64 word of `text` decodes to bytes holding `secret`."""
    for word in text.replace("=", " = ").split():
        for alphabet in (None, b"-_"):
            try:
                if secret.encode() in base64.b64decode(word + "==", altchars=alphabet, validate=False):
                    return True
            except (binascii.Error, ValueError):
                pass
    return False


@pytest.mark.parametrize("before", ["", "a", "ab"], ids=["aligned", "offset-1", "offset-2"])
@pytest.mark.parametrize("urlsafe", [False, True], ids=["standard", "urlsafe"])
def test_vv_masks_the_api_key_base64_encoded_at_every_alignment(before: str, urlsafe: bool) -> None:
    Secret(API_KEY)
    content = f"{before}VLLM_API_KEY={API_KEY}\nmore\n".encode()
    encoded = (base64.urlsafe_b64encode if urlsafe else base64.b64encode)(content).decode()
    said = traced("cat /etc/provision/vllm/vllm.env | base64 -w0", f"content={encoded}\n")
    assert any("out: content=" in line for line in said)
    assert not any(decodes_to(line, API_KEY) for line in said), said


def test_a_secret_probes_output_never_reaches_vv_even_before_the_value_is_known(tmp_path: Path) -> None:
    unknown = "generated-key-the-redactor-has-not-seen-0123"
    key_file = tmp_path / "api-key"
    key_file.write_text(unknown + "\n")
    probe = REGISTRY["generated_secret"].probe(REGISTRY["generated_secret"].Args(path=str(key_file)))
    said: list[str] = []
    from tests.unit.ops_support import LocalTestConnection

    cache = ProbeCache()
    cache.fill(TracedConnection(LocalTestConnection(), 2, said.append), [probe.snippet, "echo other=shown"])
    trace = "\n".join(said)
    assert "other=shown" in trace, "the other probes' output is still shown"
    assert unknown not in trace and not decodes_to(trace, unknown), trace
    assert probe.parse(cache.get(probe.snippet)).reveal() == unknown, "the probe itself still reads it"


@pytest.mark.parametrize("secret", ['pa"ss-word-1', "pa\\ss-word-2", "pa\tss-word-3", "pässwörd-4", "p'ss\nword-5"],
                         ids=["quote", "backslash", "tab", "non-ascii", "newline"])
def test_the_json_document_masks_secrets_that_json_escapes(secret: str, tmp_path: Path) -> None:
    Secret(secret)
    task = TaskResult("login", "role", Status.FAILED, summary=f"tried {secret}", error=f"refused: {secret}",
                      data={"answer": secret, secret: "as a key"})
    document = RunResult({"h": HostResult("h", tasks=[task], error=f"host h: {secret}")})
    path = tmp_path / "run.json"
    document.write_json(path)
    text = path.read_text()
    assert secret not in json.dumps(json.loads(text), ensure_ascii=False), text
    assert json.dumps(secret)[1:-1] not in text and json.dumps(secret, ensure_ascii=False)[1:-1] not in text


@pytest.mark.parametrize("secret", ["it's-a-secret-1", 'say "hi" $HOME `x` 2', "plain-secret-3"])
def test_a_shell_quoted_secret_is_masked_in_the_v_headline(secret: str) -> None:
    Secret(secret)
    line = traced(f"curl -H {quote('Authorization: Bearer ' + secret)} https://hub/x")[0]
    double_quoted = secret.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$").replace("`", "\\`")
    assert "***" in line
    for form in (secret, quote(secret)[1:-1], double_quoted):
        assert form not in line, line
    said = traced(f'echo "{double_quoted}"')
    assert double_quoted not in said[0] and "***" in said[0]


def test_short_secrets_are_masked_as_whole_tokens_and_whole_values(tmp_path: Path) -> None:
    Secret("pw")
    Secret("Q")
    assert REDACTOR("sudo: password=pw refused; 'pw'; pw") == "sudo: password=*** refused; '***'; ***"
    assert REDACTOR("a Q b, Q.") == "a *** b, ***."
    # inside a word it stays: masking every "pw" and "Q" would shred the text and point at the secret
    assert REDACTOR("pwd Quiet sQl") == "pwd Quiet sQl"
    assert REDACTOR("value=cHc=") == "value=***", "its base64"
    task = TaskResult("t", None, Status.OK, data={"become_password": "pw", "letter": "Q", "word": "pwd"})
    path = tmp_path / "run.json"
    RunResult({"h": HostResult("h", tasks=[task])}).write_json(path)
    data = json.loads(path.read_text())["hosts"]["h"]["tasks"][0]["data"]
    assert data == {"become_password": "***", "letter": "***", "word": "pwd"}


def test_render_json_masks_a_secret_in_the_serve_arguments(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    secret = 'hf_rendered"secret\\value-7'
    host = tmp_path / "host.yaml"
    host.write_text("name: here\nconnection: local\nvars:\n  served_model_name: workhorse\n"
                    f"  vllm_extra_flags:\n    tokenizer: !secret {secret}\n")
    assert main(["render", str(host), "--json"]) == 0
    output = capsys.readouterr().out
    argv = json.loads(output)["here"]
    assert argv[argv.index("--tokenizer") + 1] == "***"
    assert secret not in output and json.dumps(secret)[1:-1] not in output


ARGV = ["up", "inventory/host.yaml", "-e", "hf_token=hf_holder_token_0123", "-e",
        "ansible_become_password=pw-holder-4567", "--tags", "model"]


def holder_record(tmp_path: Path, command: str | None) -> tuple[str, int]:
    conn = LocalConnection("here", become=False)
    run_lock = RunLock("here", command, lock_dir=str(tmp_path)) if command else RunLock("here", lock_dir=str(tmp_path))
    run_lock.start(conn)
    run_lock.confirm(conn)
    try:
        record = tmp_path / "run.holder.json"
        return record.read_text(), stat.S_IMODE(record.stat().st_mode)
    finally:
        run_lock.release()


def test_the_run_holder_record_is_0600_with_the_sub_command_and_inventory_only(tmp_path: Path) -> None:
    from provision.cli.inputs import run_label
    from provision.cli.main import build_parser

    text, mode = holder_record(tmp_path, run_label(build_parser().parse_args(ARGV)))
    assert mode == 0o600
    assert json.loads(text)["command"] == "provision up inventory/host.yaml"
    assert "hf_holder_token" not in text and "pw-holder" not in text


def test_a_run_lock_never_records_the_command_line_by_itself(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "argv", ["provision", *ARGV])
    text, mode = holder_record(tmp_path, None)
    assert "hf_holder_token" not in text and "pw-holder" not in text and mode == 0o600


def test_a_controller_with_the_same_hostname_does_not_end_anothers_holder(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Two containers named alike: the holder's pid is gone from here, but it is not our controller."""
    dead = subprocess.Popen(["true"])
    dead.wait()
    monkeypatch.setenv("PROVISION_CACHE_DIR", str(tmp_path / "container-a"))
    conn = LocalConnection("here", become=False)
    holder = RunLock("here", "provision up a.yaml", lock_dir=str(tmp_path))
    holder.me["controller_pid"] = dead.pid  # its pid means nothing in this container
    holder.start(conn)
    holder.confirm(conn)
    try:
        monkeypatch.setenv("PROVISION_CACHE_DIR", str(tmp_path / "container-b"))
        other = RunLock("here", "provision up b.yaml", lock_dir=str(tmp_path))
        assert other.me["controller_host"] == holder.me["controller_host"]
        other.start(conn)
        with pytest.raises(RunLockHeld, match=r"provision up a\.yaml"):
            other.confirm(conn)
    finally:
        holder.release()


def test_the_controller_id_is_random_kept_0600_in_the_users_cache(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from provision import controller_cache
    from provision.runner.run_lock import controller_id

    monkeypatch.setenv("PROVISION_CACHE_DIR", str(tmp_path / "cache"))
    first = controller_id()
    assert controller_id() == first and len(first) == 32
    kept = next((tmp_path / "cache").rglob("controller-id"))
    # kept as every cache entry is: behind its HMAC (controller_cache.read checks it)
    assert controller_cache.read(kept) == first.encode() and stat.S_IMODE(kept.stat().st_mode) == 0o600
    monkeypatch.setenv("PROVISION_CACHE_DIR", str(tmp_path / "another"))
    assert controller_id() != first


HF_TOKEN = "hf_unit_wire_token_0123456789"


def hub_args(endpoint: str, **extra: object) -> HfSnapshotArgs:
    return HfSnapshotArgs(repo="org/model", cache_dir="/var/lib/provision/huggingface/hub", endpoint=endpoint,
                          token=HF_TOKEN, **extra)


def test_the_hub_token_goes_only_over_https_or_to_a_mirror_marked_trusted() -> None:
    assert HF_TOKEN in probe_script(hub_args("https://huggingface.co"))
    assert HF_TOKEN not in probe_script(hub_args("http://10.0.0.5:8080"))
    assert HF_TOKEN in probe_script(hub_args("http://10.0.0.5:8080", token_over_http=True))


def test_a_refusal_over_plain_http_says_the_token_was_not_sent() -> None:
    from provision.ops.hf_snapshot import api_failure

    message = api_failure(hub_args("http://10.0.0.5:8080"), "401", "", "")
    assert "not sent over plain http" in message and "office_cache_trusted" in message


class Redirector(http.server.BaseHTTPRequestHandler):
    """Answers every request with a 302 to `target` + the same path, recording its Authorization."""

    target = ""
    seen: list[str | None] = []

    def do_GET(self) -> None:
        type(self).seen.append(self.headers.get("Authorization"))
        self.send_response(302)
        self.send_header("Location", self.target + self.path)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None: ...


@pytest.mark.parametrize("elsewhere", ["127.0.0.2", "127.0.0.1"], ids=["another-host", "another-port"])
def test_the_bundle_builder_keeps_the_token_off_a_redirect_to_another_origin(tmp_path: Path, elsewhere: str) -> None:
    from provision.bundle import weights

    hub = start_hub(tmp_path / "repo", shard_size=1024, shards=1, host=elsewhere)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Redirector)
    Redirector.target, Redirector.seen = f"http://{elsewhere}:{hub.server.server_address[1]}", []
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        endpoint = f"http://127.0.0.1:{server.server_address[1]}"
        commit, files, _ = weights.file_list(endpoint, hub.repository.repo_id, "main", Secret(HF_TOKEN),
                                             trusted_http=True)
    finally:
        server.shutdown()
        hub.stop()
    assert commit == hub.repository.commit and files
    assert Redirector.seen == [f"Bearer {HF_TOKEN}"], "the trusted mirror itself gets the token"
    assert [r["authorization"] for r in hub.state.requests] == ["none"], "the redirect's target does not"


@pytest.mark.parametrize("elsewhere", ["127.0.0.2", "127.0.0.1"], ids=["another-host", "another-port"])
def test_curl_on_the_host_keeps_the_token_off_a_redirect_to_another_origin(tmp_path: Path, elsewhere: str) -> None:
    """The download's own header config (`auth`) and curl's -L, as the weights' fetch runs them: curl
    drops a custom Authorization header on a redirect to another host (7.58.0, CVE-2018-1000007) or
    port (7.83.0, CVE-2022-27776). A guard on that behaviour, which the download relies on (this
    machine's curl: Debian bookworm's, as on the lab hosts; it passed before the change too)."""
    from provision.ops.hf_snapshot import auth_function

    hub = start_hub(tmp_path / "repo", shard_size=1024, shards=1, host=elsewhere)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Redirector)
    Redirector.target, Redirector.seen = f"http://{elsewhere}:{hub.server.server_address[1]}", []
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/api/models/{hub.repository.repo_id}/revision/main"
    try:
        script = f"{auth_function(Secret(HF_TOKEN))}\nauth | curl -sS -f -L -K - -o /dev/null {quote(url)}"
        done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=30, check=False)
    finally:
        server.shutdown()
        hub.stop()
    assert done.returncode == 0, done.stderr
    assert Redirector.seen == [f"Bearer {HF_TOKEN}"]
    assert [r["authorization"] for r in hub.state.requests] == ["none"]


def test_office_users_keys_leave_no_trace_in_the_gateways_plans(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The users' keys and the backends' key (roles/office_gateway, docs/office-users.md) are only in the
    root-only maps: their diffs say "content changed (secret)", the scripts (what -v and a process list
    show) hold none, the bytes go on stdin; haproxy.cfg (0644, its diff shown) holds none either."""
    from provision.office_gateway.users import User, generate
    from tests.unit.ops_support import plan, script_of
    from tests.unit.serving_support import API_KEY as FLEET_KEY
    from tests.unit.test_office_gateway_users import ALICE, users_tasks

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("PROVISION_CACHE_DIR", str(tmp_path / "cache"))  # its key is in the config folder
    bob = generate("gw", [User("bob", None)])["bob"]
    keys = (ALICE, bob, FLEET_KEY)
    tasks = users_tasks(tmp_path)
    for name in ("the office users' keys are the gateway's", "the gateway holds the backends' key"):
        args = tasks[name].args
        planned = plan("file", "type=file\nmode=600\nuid=0\ngid=0\nowner=root\ngroup=root\nsize=3\n"
                       "sha256=0000000000000000000000000000000000000000000000000000000000000000\n",
                       dest=args.dest, content=args.content, mode=args.mode, owner="root", group="root",
                       secret=args.secret)
        assert planned.diff == f"{args.dest}: content changed (secret)\n"
        assert not any(key in script_of(planned) + planned.summary for key in keys), script_of(planned)
        assert any(key.encode() in (planned.commands[0].data or b"") for key in keys)  # on stdin (fd 3) only
    config = tasks["haproxy routes the office endpoint to the fleet"].args.content
    assert not any(key in config for key in keys)

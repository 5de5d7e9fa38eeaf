"""`file` / `template`: recorded probe outputs -> plans, and a real converge in a temp directory."""

from __future__ import annotations

import base64
import hashlib
import os
import stat

import pytest

from provision.errors import InputError, TaskFailed
from provision.ops import REGISTRY
from provision.ops.filestate import CONTENT_CAP
from provision.secrets import Secret
from tests.unit.ops_support import (
    assert_bash_parses,
    assert_commands_parse,
    converge_local,
    make_args,
    plan,
    probe_local,
    script_of,
)

OLD = "listen 80\nworkers 2\n"
NEW = "listen 80\nworkers 4\n"


def recorded(content: str = OLD, mode: str = "644", owner: str = "root", size: int | None = None,
             with_content: bool = True) -> str:
    """What the file probe prints for an existing regular file."""
    data = content.encode()
    lines = ["type=file", f"mode={mode}", "uid=0", "gid=0", f"owner={owner}", "group=root",
             f"size={len(data) if size is None else size}", f"sha256={hashlib.sha256(data).hexdigest()}"]
    if with_content:
        lines.append(f"content={base64.b64encode(data).decode()}")
    return "\n".join(lines) + "\n"


def test_converged_file_plans_nothing() -> None:
    result = plan("file", recorded(OLD, mode="644"), dest="/etc/app.conf", content=OLD, mode="0644", owner="root")
    assert not result.changed
    assert result.commands == []


def test_content_change_writes_atomically_with_a_diff() -> None:
    result = plan("file", recorded(OLD), dest="/etc/app.conf", content=NEW)
    assert result.changed
    assert "-workers 2\n+workers 4" in result.diff
    assert result.diff.startswith("--- /etc/app.conf\n+++ /etc/app.conf\n")
    script = script_of(result)
    assert 'cat <&3 > "$tmp"' in script
    assert "mktemp -- '/etc/.app.conf.provision-XXXXXX'" in script
    assert "mv -f -- \"$tmp\" '/etc/app.conf'" in script
    # unspecified attributes keep the existing file's
    assert "chown -- '0:0'" in script and "chmod -- '0644'" in script
    assert result.commands[0].data == NEW.encode()
    assert NEW not in script
    assert_commands_parse(result)


def test_new_file_is_created_with_parent_and_default_mode() -> None:
    result = plan("file", "type=absent\n", dest="/etc/app/app.conf", content=NEW)
    assert result.changed
    script = script_of(result)
    assert "mkdir -p -- '/etc/app'" in script
    assert "chmod -- '0644'" in script
    assert result.diff.startswith("--- /dev/null\n+++ /etc/app/app.conf\n")
    assert_commands_parse(result)


def test_only_mode_differs_changes_attributes_in_place() -> None:
    result = plan("file", recorded(OLD, with_content=False), dest="/etc/app.conf", content=OLD, mode="0600")
    assert result.changed
    assert script_of(result) == "chmod -- '0600' '/etc/app.conf'"
    assert "mode 0644 -> 0600" in result.summary
    assert result.diff == ""


def test_owner_given_as_uid_matches_numeric_owner() -> None:
    assert not plan("file", recorded(OLD), dest="/etc/app.conf", content=OLD, owner="0", group="0").changed


def test_secret_content_is_never_shown_and_defaults_to_0600() -> None:
    token = "hf_secretvalue123"
    result = plan("file", "type=absent\n", dest="/etc/vllm/env", content=Secret(f"HF_TOKEN={token}\n"))
    assert result.diff == "/etc/vllm/env: content changed (secret)\n"
    assert token not in script_of(result) and token not in result.summary
    assert token.encode() in (result.commands[0].data or b"")
    assert "chmod -- '0600'" in script_of(result)


def test_secret_flag_hides_diff_and_probe_reads_no_content() -> None:
    args = {"dest": "/etc/vllm/env", "content": "KEY=abcd\n", "secret": True}
    probe = REGISTRY["file"].probe(make_args("file", **args)).snippet
    assert "base64" not in probe and "abcd" not in probe  # never reads the content out
    result = plan("file", recorded("KEY=old\n", with_content=False), **args)
    assert result.diff == "/etc/vllm/env: content changed (secret)\n"


def test_large_file_compares_by_sha256_only() -> None:
    big = "x" * (CONTENT_CAP + 1)
    state = recorded(big, with_content=False)
    result = plan("file", state, dest="/var/lib/app/blob", content=big[:-1] + "y")
    assert result.changed
    assert "not shown" in result.diff


def test_absent_removes_and_converged_absent_is_ok() -> None:
    result = plan("file", recorded(OLD), dest="/etc/app.conf", state="absent")
    assert result.changed and script_of(result) == "rm -f -- '/etc/app.conf'"
    assert "-listen 80" in result.diff
    assert not plan("file", "type=absent\n", dest="/etc/app.conf", state="absent").changed


def test_directory_in_the_way_is_refused() -> None:
    with pytest.raises(TaskFailed, match="not a regular file"):
        plan("file", "type=directory\nmode=755\n", dest="/etc/app.conf", content=OLD)


def test_symlink_is_followed_to_its_target() -> None:
    state = "target=/srv/real.conf\n" + recorded(OLD)
    result = plan("file", state, dest="/etc/app.conf", content=NEW)
    assert "mv -f -- \"$tmp\" '/srv/real.conf'" in script_of(result)


def test_template_without_rendered_content_is_an_input_error() -> None:
    with pytest.raises(InputError, match="not rendered"):
        plan("template", "type=absent\n", dest="/etc/x", src="x.j2")


def test_template_with_content_behaves_as_file() -> None:
    result = plan("template", recorded(OLD), dest="/etc/app.conf", src="app.conf.j2", content=OLD)
    assert not result.changed


def test_unquoted_yaml_octal_mode_is_refused() -> None:
    with pytest.raises(ValueError, match="quoted octal string"):
        make_args("file", dest="/etc/x", content="", mode=420)


def test_probe_parses_and_converges_for_real(tmp_path) -> None:
    dest = tmp_path / "sub" / "app.conf"
    first, second = converge_local("file", dest=str(dest), content=NEW, mode="0640")
    assert first.changed and not second.changed
    assert dest.read_text() == NEW
    assert stat.S_IMODE(os.stat(dest).st_mode) == 0o640
    assert not [p for p in dest.parent.iterdir() if p.name != "app.conf"], "temp file left behind"
    assert_bash_parses(REGISTRY["file"].probe(make_args("file", dest=str(dest), content=NEW)).snippet)


def test_probe_returns_content_only_when_it_differs(tmp_path) -> None:
    dest = tmp_path / "app.conf"
    dest.write_text(OLD)
    assert "content=" not in probe_local("file", dest=str(dest), content=OLD)
    assert "content=" in probe_local("file", dest=str(dest), content=NEW)


def test_rendered_text_holding_a_secret_defaults_to_0600_and_is_masked() -> None:
    Secret("api-key-0123456789")
    result = plan("file", "type=absent\n", dest="/etc/vllm/vllm.env", content="PORT=8000\nAPI_KEY=api-key-0123456789\n")
    assert "chmod -- '0600'" in script_of(result)
    assert "+PORT=8000" in result.diff and "api-key-0123456789" not in result.diff and "API_KEY=***" in result.diff


def test_a_file_read_whole_is_not_hashed_on_the_host(tmp_path) -> None:
    """When the content comes back anyway (json_merge, a file without a known sha256), its sha256 is
    taken on the controller: one process fewer on the host in every such probe."""
    import subprocess

    from provision.ops.filestate import file_state_probe, sha256_hex

    target = tmp_path / "daemon.json"
    target.write_bytes(b'{"log-driver": "json-file"}\n')
    probe = file_state_probe(str(target))
    out = subprocess.run(["bash", "-c", f"set +e +u\n{probe.snippet}"], capture_output=True, text=True,
                         check=True).stdout
    assert ("content=" in out or "text=" in out) and "sha256=" not in out
    state = probe.parse(out)
    assert state.sha256 == sha256_hex(target.read_bytes()) and state.content == target.read_bytes()
    big = file_state_probe(str(target), want_content=False)
    out = subprocess.run(["bash", "-c", f"set +e +u\n{big.snippet}"], capture_output=True, text=True, check=True).stdout
    assert "content=" not in out and big.parse(out).sha256 == sha256_hex(target.read_bytes())


def test_the_probe_brings_back_every_file_byte_for_byte_text_without_a_process(tmp_path):
    """Small printable ASCII comes back as escaped text (bash reads it: no base64 process); CRLF,
    UTF-8, a NUL byte, a file over the text cap come back as base64; all of them exactly."""
    import subprocess

    from provision.ops.filestate import TEXT_CAP, file_state_probe

    files = {"json": b'{\n  "a": "b\\\\c",\t"x": 1\n}\n', "no-newline": b"last line", "empty": b"",
             "blank-lines": b"\n\n", "crlf": b"line\r\n", "utf8": "café\n".encode(), "nul": b"a\0b\n",
             "big": b"x" * (TEXT_CAP + 1)}
    sent_as = {}
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
        probe = file_state_probe(str(tmp_path / name))
        out = subprocess.run(["bash", "-c", f"export LC_ALL=C\n{probe.snippet}"], capture_output=True, text=True,
                             check=True).stdout
        assert probe.parse(out).content == data, name
        sent_as[name] = "text" if "\ntext=" in f"\n{out}" else "base64"
    assert sent_as == {"json": "text", "no-newline": "text", "empty": "text", "blank-lines": "text",
                       "crlf": "base64", "utf8": "base64", "nul": "base64", "big": "base64"}

"""`vllm_release`, `vllm_smoke`, `vllm_rollback`: arguments checked before any host is touched, plans from
recorded probe output, and one deploy walked through a scripted host (activate, ready, smoke, record)."""

from __future__ import annotations

import base64
import json
import subprocess
from typing import Any

import pytest
from pydantic import ValidationError

from provision.connection.base import CommandResult
from provision.errors import TaskFailed
from provision.ops import REGISTRY
from provision.secrets import REDACTOR
from provision.vllm.release import Record, sha256_text
from tests.unit.ops_support import ScriptedConnection, assert_bash_parses, context, make_args, plan
from tests.unit.vllm_service_support import RELEASE_SETTINGS, role_service

KEY = "sk-ops-test-key-abcdefghijklmnop"
FLAGS = {"served-model-name": "workhorse", "max-model-len": 131072, "kv-cache-dtype": "fp8",
         "limit-mm-per-prompt": {"image": 1, "video": 0}, "host": "0.0.0.0", "port": 8000}
RELEASE_ARGS: dict[str, Any] = {
    "image": "vllm/vllm-openai:v0.21.0-cu129", "image_pinned": "vllm/vllm-openai@sha256:" + "ab" * 32,
    "model": "cyankiwi/gemma-4-26B-A4B-it-AWQ-4bit", "service": role_service(), "flags": FLAGS,
    "weights": {"repo": "cyankiwi/gemma-4-26B-A4B-it-AWQ-4bit", "revision": "main", "commit": "c" * 40},
    "volumes": ["/var/lib/provision/huggingface:/root/.cache/huggingface"],
    "env": {"HF_ENDPOINT": "https://huggingface.co"}, "api_key": KEY, **RELEASE_SETTINGS,
}
SERVICE_ARGS = {"service": role_service()}
SAMPLES = {"vllm_release": RELEASE_ARGS, "vllm_smoke": SERVICE_ARGS, "vllm_rollback": SERVICE_ARGS,
           "hf_snapshot": {"repo": "a/b", "cache_dir": "/nonexistent/hub", "endpoint": "http://127.0.0.1:9"},
           "docker_image": {"image": "surely/not-an-image:1"},
           "generated_secret": {"path": "/nonexistent/key"}}


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_probe_is_safe_inside_the_shared_script(name: str) -> None:
    probe = REGISTRY[name].probe(make_args(name, **SAMPLES[name]))
    if probe is None:
        return
    snippet = probe.snippet
    assert_bash_parses(snippet)
    done = subprocess.run(["bash", "-c", f"set +e\n{snippet}\necho '@@after'\ncat\n"], input="@@stdin-kept\n",
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.stdout.endswith("@@after\n@@stdin-kept\n"), done.stdout[-300:]


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_unknown_arguments_are_refused(name: str) -> None:
    with pytest.raises(ValidationError, match="Extra inputs are not permitted"):
        make_args(name, **SAMPLES[name], surely_not_an_argument=1)


@pytest.mark.parametrize(("change", "message"), [
    ({"flags": {**FLAGS, "api-key": "x"}}, "api-key"),
    ({"service": role_service(served_name="other")}, "not among the names vLLM serves"),
    ({"volumes": "not-a-list"}, "volumes"),
])
def test_bad_release_arguments_are_refused(change: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        make_args("vllm_release", **{**RELEASE_ARGS, **change})


@pytest.mark.parametrize("name", ["vllm_release", "vllm_smoke", "vllm_rollback", "vllm_memory"])
def test_a_missing_service_value_is_an_input_error_naming_it(name: str) -> None:
    """No operation has a default of its own: the role's vllm_service is the one source."""
    service = role_service()
    del service["ready_timeout"]
    with pytest.raises(TaskFailed, match=r"invalid arguments for vllm_\w+: service\.ready_timeout: Field required"):
        REGISTRY[name].arguments({**SAMPLES.get(name, {"planned": {}}), "service": service})


def test_a_missing_release_value_is_an_input_error_naming_it() -> None:
    args = {key: value for key, value in RELEASE_ARGS.items() if key != "stop_timeout"}
    with pytest.raises(TaskFailed, match="stop_timeout: Field required"):
        REGISTRY["vllm_release"].arguments(args)


def test_the_api_key_is_masked_from_the_moment_it_is_read() -> None:
    make_args("vllm_release", **{**RELEASE_ARGS, "api_key": "freshly-read-secret-42"})
    assert REDACTOR("freshly-read-secret-42") == "***"
    assert REDACTOR("https://huggingface.co") == "https://huggingface.co", "plain env values stay readable"


def probe_output(record: Record | None = None, unit: str | None = None, env: str | None = None,
                 active: str = "active", enabled: str = "enabled", key: str | None = None) -> str:
    lines = ["probed=1"]
    if record is not None:
        lines.append(f"record={base64.b64encode(record.text().encode()).decode()}")
    if unit is not None:
        lines += [f"unit_sha256={sha256_text(unit)}", f"unit_text={base64.b64encode(unit.encode()).decode()}"]
    if env is not None:
        lines.append(f"env_sha256={sha256_text(env)}")
    if key:
        lines.append(f"key_sha256={sha256_text(key)}")
    lines += [f"ActiveState={active}", f"UnitFileState={enabled}", "NeedDaemonReload=no"]
    return "\n".join(lines) + "\n"


def converged_probe(**overrides: Any) -> str:
    release = make_args("vllm_release", **{**RELEASE_ARGS, **overrides}).release()
    return probe_output(Record(current=release.entry()), release.unit_text, release.env_text, key=release.key_text)


def test_the_running_release_means_no_change_and_no_restart() -> None:
    result = plan("vllm_release", converged_probe(), **RELEASE_ARGS)
    assert not result.changed and not result.commands and result.result["smoked"] is False


def test_a_changed_flag_is_a_deploy_whose_diff_shows_the_unit_and_hides_the_env() -> None:
    flags = {**FLAGS, "max-model-len": 65536}
    result = plan("vllm_release", converged_probe(), **{**RELEASE_ARGS, "flags": flags})
    assert result.changed and "arguments --max-model-len 131072 -> 65536" in result.summary
    assert "-    --max-model-len 131072 \\" in result.diff and "+    --max-model-len 65536 \\" in result.diff
    assert KEY not in result.diff


def test_a_new_key_shows_only_that_the_key_changed() -> None:
    result = plan("vllm_release", converged_probe(), **{**RELEASE_ARGS, "api_key": "k2-abcdef"})
    assert result.summary.endswith("API key changed")
    assert "/etc/provision/vllm/api-key: API key changed (secret)" in result.diff and "k2-abcdef" not in result.diff


def test_the_key_is_a_read_only_mount_never_the_containers_env_and_no_hf_token_enters() -> None:
    release = make_args("vllm_release", **RELEASE_ARGS).release()
    assert KEY not in release.unit_text and KEY not in release.env_text
    assert "-v /etc/provision/vllm/api-key:/run/secrets/VLLM_API_KEY:ro" in release.unit_text
    assert "--entrypoint /bin/sh" in release.unit_text and "HF_TOKEN" not in release.env_text
    assert release.key_text == KEY


def test_check_mode_before_the_first_pull_says_so() -> None:
    result = plan("vllm_release", probe_output(active="inactive", enabled=""), **{**RELEASE_ARGS, "image_pinned": ""})
    assert result.changed and "(once vllm/vllm-openai:v0.21.0-cu129 is pulled): first release" in result.summary


def test_a_deploy_walks_activate_ready_smoke_record() -> None:
    result = plan("vllm_release", probe_output(active="inactive", enabled=""), **RELEASE_ARGS)
    models = json.dumps({"data": [{"id": "workhorse"}]}) + "\n200"
    answer = json.dumps({"choices": [{"message": {"content": "Red."}, "finish_reason": "stop"}],
                         "usage": {"completion_tokens": 2}})

    def b64(text: str) -> str:
        return base64.b64encode(text.encode()).decode()

    replies = [
        CommandResult("cursor=s=1\nsince=1\nrestarts=0\n", "", 0),  # stage + activate
        CommandResult(f"health=200\nmodels={b64(models)}\nLoadState=loaded\nActiveState=active\nSubState=running\n"
                  "NRestarts=0\nlog=\n", "", 0),  # ready
        CommandResult(f"text_status=200\ntext_time=0.2\ntext_body={b64(answer)}\n"
                  f"vision_status=200\nvision_time=0.3\nvision_body={b64(answer)}\n", "", 0),  # smoke
        CommandResult("", "", 0),  # record
    ]
    conn = ScriptedConnection(replies)
    applied = REGISTRY["vllm_release"].apply(context(conn), result)
    assert applied.changed and applied.result["smoked"] is True
    assert applied.result["smoke"]["vision"]["answer"] == "Red."
    assert "ready after 0s; text 0.20s 'Red.'" in applied.summary
    assert applied.summary.startswith(result.summary + "; ") and "ready" not in result.summary
    assert all(KEY not in script for script in conn.scripts), "the key travels only as payload"


def test_the_guards_note_is_cleared_by_a_real_record_write() -> None:
    release = make_args("vllm_release", **RELEASE_ARGS).release()
    note = "the upgrade guard restored release x (the controller was gone)"
    state = probe_output(Record(current=release.entry(), note=note), release.unit_text, release.env_text,
                         key=release.key_text)
    result = plan("vllm_release", state, **RELEASE_ARGS)
    assert result.changed and note in result.summary
    [write] = result.steps
    written = json.loads(write.data or b"")
    assert result.commands == [write] and written["current"] == release.entry() and "note" not in written
    assert_bash_parses(write.script)
    conn = ScriptedConnection([CommandResult("", "", 0)])
    applied = REGISTRY["vllm_release"].apply(context(conn), result)
    assert applied.changed and conn.scripts == [write.script], "apply ran the plan's one step, nothing else"


def test_smoke_is_never_a_change_and_a_probe_cut_short_leaves_it_to_its_apply() -> None:
    result = plan("vllm_smoke", "", **SERVICE_ARGS)
    assert not result.changed and result.steps and not result.commands, "its apply does the work, said as an Action"
    assert result.steps[0].description == "wait for vllm to be ready, then the text and vision smoke checks"


def test_rollback_needs_a_previous_release() -> None:
    with pytest.raises(TaskFailed, match="nothing to roll back to"):
        plan("vllm_rollback", probe_output(Record(current={"id": "a"})), **SERVICE_ARGS)
    record = Record(current={"id": "aaa", "image": "new"}, previous={"id": "bbb", "image": "old"})
    result = plan("vllm_rollback", probe_output(record), **SERVICE_ARGS)
    assert result.changed and result.summary == (
        "roll back from release aaa (image new, weights ?) to release bbb (image old, weights ?)")


def test_the_units_start_timeout_follows_vllm_ready_timeout() -> None:
    args = make_args("vllm_release", **{**RELEASE_ARGS, "service": role_service(ready_timeout=180)})
    assert "TimeoutStartSec=180\n" in args.release().unit_text

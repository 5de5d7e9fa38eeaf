"""`vllm_smoke` read-only first: its probe takes the readiness poll's first look and, when the server
answers, sends the text and vision checks itself; a ready server that answers right is planned with
no steps (nothing applied, no round trip of its own), anything else is left to today's wait and checks.

The probe runs here in bash, against the stand-in vLLM server started with the profile's own flags
(tests/standins/vllm/, serving_support.py); no systemd here, so its unit lines are absent from the
output, which the poll's judgement reads as "loaded" (the HTTP answers decide).
"""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path
from typing import Any

import pytest

from provision.connection.local import LocalConnection
from provision.inventory.loader import load_inventory
from provision.ops import REGISTRY
from provision.ops.base import Step
from provision.playbook.loader import load_playbook
from provision.runner.events import SilentReporter
from provision.runner.host_run import RunOptions
from provision.runner.runner import RunConfig, Runner
from provision.vllm.smoke import SmokeFailed
from tests.standins.vllm.launch import free_port
from tests.unit.ops_support import context, make_args, plan, probe_local
from tests.unit.serving_support import API_KEY, REPO_ROOT, start_profile_standin, stop
from tests.unit.test_service_readiness import models_body, output
from tests.unit.vllm_service_support import role_service

WAIT = "wait for vllm to be ready, then the text and vision smoke checks"
RED = "'Red. The image is mostly red.'"


def described(steps: list[Step]) -> list[str]:
    """The steps as check mode lists them: apply's Python-side step is typed, its description is what is said."""
    return [step.description for step in steps]


@pytest.fixture
def key_file(tmp_path: Path) -> Path:
    path = tmp_path / "api-key"
    path.write_text(f"{API_KEY}\n")
    return path


def smoke_args(port: int, key_file: Path) -> dict[str, Any]:
    return {"service": role_service(port=port, api_key_file=str(key_file))}


def test_a_ready_server_that_answers_right_is_checked_by_the_probe_alone(key_file: Path) -> None:
    server = start_profile_standin()
    try:
        args = smoke_args(server.port, key_file)
        found = probe_local("vllm_smoke", **args)
        result = plan("vllm_smoke", found, **args)
    finally:
        stop(server)
    assert not result.changed and result.steps == [], "nothing to apply: the probe did the checks"
    assert result.summary.startswith("ready after 0s; text ") and "; vision " in result.summary
    assert RED in result.summary
    # what a passing apply reports, field for field (`provision smoke`, --json, the results document)
    assert set(result.result) == {"ready_seconds", "smoke", "summary"} and result.result["summary"] == result.summary
    assert result.result["ready_seconds"] == 0
    smoke = result.result["smoke"]
    assert smoke["ok"] and smoke["text"]["ok"] and smoke["text"]["answer"] and smoke["text"]["tokens"] > 0
    assert smoke["vision"]["answer"] == "Red. The image is mostly red." and smoke["vision"]["seconds"] > 0


def test_the_probe_carries_its_requests_and_never_the_key(key_file: Path) -> None:
    server = start_profile_standin()
    try:
        args = smoke_args(server.port, key_file)
        snippet = REGISTRY["vllm_smoke"].probe(make_args("vllm_smoke", **args)).snippet
        found = probe_local("vllm_smoke", **args)
    finally:
        stop(server)
    assert "data:image/png;base64," in snippet, "the vision request is in the snippet: a probe has no stdin"
    assert "<&3" not in snippet
    assert str(key_file) in snippet and API_KEY not in snippet and API_KEY not in found
    assert "text_status=200" in found and "vision_status=200" in found


def test_a_server_not_answering_gets_no_requests_and_is_left_to_the_wait(tmp_path: Path) -> None:
    args = smoke_args(free_port(), tmp_path / "no-key")
    found = probe_local("vllm_smoke", **args)
    assert "health=000" in found and "text_status" not in found
    result = plan("vllm_smoke", found, **args)
    assert not result.changed and described(result.steps) == [WAIT] and result.summary == WAIT


@pytest.mark.parametrize("found", [
    output(load="not-found", active="inactive", sub="dead"),
    output(active="activating", sub="start", log=["Loading weights took 12.3 seconds"]),
    output(health="503", log=["EngineCore died"]),
    output(health="200", models=models_body("other-model")),
    "",  # a probe cut short
], ids=["not-installed", "starting", "engine-died", "serves-another-model", "empty"])
def test_a_service_not_ready_now_is_left_to_the_wait(found: str) -> None:
    result = plan("vllm_smoke", found, **smoke_args(8000, Path("/etc/provision/vllm/api-key")))
    assert not result.changed and described(result.steps) == [WAIT]


def test_a_wrong_answer_is_left_to_the_apply_which_fails_as_before(key_file: Path) -> None:
    server = start_profile_standin("wrong-vision")
    try:
        args = smoke_args(server.port, key_file)
        found = probe_local("vllm_smoke", **args)
        result = plan("vllm_smoke", found, **args)
        assert "vision_status=200" in found and described(result.steps) == [WAIT]
        conn = LocalConnection("here")
        with pytest.raises(SmokeFailed, match=r"^smoke check failed: vision: the answer 'Blue\. The image is mostly "
                                              r"blue\.' does not contain 'red'$"):
            REGISTRY["vllm_smoke"].apply(context(conn), result)
        assert conn.round_trips == 2, "today's wait (one look: ready) and checks"
    finally:
        stop(server)


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip("\n"))


@pytest.mark.parametrize("check", [False, True], ids=["run", "check"])
def test_the_smoke_role_on_a_serving_host_costs_one_round_trip(tmp_path: Path, key_file: Path, check: bool) -> None:
    """The real smoke role: its checks and the memory report's probe in the host's one probe script."""
    shutil.copytree(REPO_ROOT / "roles" / "smoke", tmp_path / "roles" / "smoke")
    # the vllm role for its defaults alone (the service mapping the smoke tasks take), none of its tasks
    shutil.copytree(REPO_ROOT / "roles" / "vllm", tmp_path / "roles" / "vllm")
    (tmp_path / "roles" / "vllm" / "tasks.yaml").write_text("[]\n")
    write(tmp_path / "playbooks" / "site.yaml", """
        - name: model server
          hosts: all
          roles: [vllm, smoke]
    """)
    server = start_profile_standin()
    try:
        write(tmp_path / "inventory.yaml", f"""
            name: here
            connection: local
            vars:
              vllm_service_name: vllm
              vllm_port: {server.port}
              served_model_name: workhorse
              vllm_env_file: {tmp_path}/vllm.env
              vllm_api_key_file: {key_file}
              vllm_state_dir: {tmp_path}/state
              vllm_ready_timeout: 30
        """)
        options = RunOptions(check=check, handlers_dir=str(tmp_path / "handlers"))
        result = Runner(load_inventory(tmp_path / "inventory.yaml"), RunConfig(options=options, lock=False),
                        SilentReporter()).run(load_playbook(tmp_path / "playbooks" / "site.yaml"))
    finally:
        stop(server)
    host = result.document()["hosts"]["here"]
    smoke = next(task for task in host["tasks"] if task["name"].startswith("vLLM answers"))
    assert smoke["status"] == "ok" and smoke["summary"].startswith("ready after 0s; text ") and RED in smoke["summary"]
    assert smoke["data"]["ready_seconds"] == 0
    assert host["changed"] == 0 and host["round_trips"] == 1, "the checks ran in the probe; nothing applied"

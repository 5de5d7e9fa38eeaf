"""`docker_image`: a present tag costs no pull; the digest pins what runs; pulls report layer progress."""

from __future__ import annotations

from pathlib import Path

import pytest

from provision.connection.base import CommandResult
from provision.errors import TaskFailed
from provision.ops import REGISTRY
from provision.ops.docker_image import PullProgress, pick_digest, split_reference
from tests.unit.ops_support import ScriptedConnection, context, plan

FIXTURES = Path(__file__).parent / "fixtures"

IMAGE = "10.0.2.2:5000/vllm/vllm-openai:standin-ok"
DIGEST = "sha256:" + "ab" * 32
PRESENT = (f"present=1\nid=sha256:{'11' * 32}\n"
           f"repo_digests=10.0.2.2:5000/other@sha256:{'ff' * 32},10.0.2.2:5000/vllm/vllm-openai@{DIGEST},\n")
# `docker pull` without a terminal (docker 20.10), as streamed from a lab host
PULL_OUTPUT = """standin-ok: Pulling from vllm/vllm-openai
4f4fb700ef54: Pulling fs layer
9e8c1c8a3d2b: Pulling fs layer
d6e0c4b3a1f2: Pulling fs layer
4f4fb700ef54: Verifying Checksum
4f4fb700ef54: Download complete
4f4fb700ef54: Pull complete
9e8c1c8a3d2b: Verifying Checksum
9e8c1c8a3d2b: Download complete
9e8c1c8a3d2b: Pull complete
d6e0c4b3a1f2: Download complete
d6e0c4b3a1f2: Pull complete
Digest: sha256:abababababababababababababababababababababababababababababababab
Status: Downloaded newer image for 10.0.2.2:5000/vllm/vllm-openai:standin-ok
10.0.2.2:5000/vllm/vllm-openai:standin-ok
"""


@pytest.mark.parametrize(("image", "parts"), [
    ("vllm/vllm-openai:v0.21.0-cu129", ("vllm/vllm-openai", "v0.21.0-cu129", None)),
    ("10.0.2.2:5000/vllm/vllm-openai", ("10.0.2.2:5000/vllm/vllm-openai", None, None)),
    (f"reg:5000/a/b:t@{DIGEST}", ("reg:5000/a/b", "t", DIGEST)),
])
def test_references_split_into_repository_tag_and_digest(image: str, parts: tuple[str, str | None, str | None]) -> None:
    assert split_reference(image) == parts


def test_the_digest_of_the_images_own_repository_is_picked() -> None:
    assert pick_digest(IMAGE, [f"10.0.2.2:5000/other@sha256:{'ff' * 32}", f"10.0.2.2:5000/vllm/vllm-openai@{DIGEST}"]) \
        == DIGEST
    assert pick_digest("docker.io/library/ubuntu:24.04", [f"ubuntu@{DIGEST}"]) == DIGEST
    assert pick_digest("local:1", []) == ""


def test_a_present_tag_is_not_pulled_again_and_is_pinned_by_digest() -> None:
    result = plan("docker_image", PRESENT, image=IMAGE)
    assert not result.changed
    assert result.result["pinned"] == f"10.0.2.2:5000/vllm/vllm-openai@{DIGEST}" and result.result["digest"] == DIGEST


def test_an_image_without_a_registry_digest_is_pinned_by_id() -> None:
    result = plan("docker_image", f"present=1\nid=sha256:{'22' * 32}\nrepo_digests=\n", image="local/built:1")
    assert result.result["pinned"] == f"sha256:{'22' * 32}"


@pytest.mark.parametrize(("state", "why"), [("present=0\n", "not present"), ("docker=missing\n", "not present")])
def test_an_absent_image_is_pulled(state: str, why: str) -> None:
    result = plan("docker_image", state, image=IMAGE)
    assert result.changed and result.summary == f"pull {IMAGE} ({why})" and result.result["pinned"] == ""


def test_force_pulls_a_present_tag() -> None:
    assert plan("docker_image", PRESENT, image=IMAGE, force=True).summary == f"pull {IMAGE} (forced)"


def test_unusable_probe_output_is_an_error_not_an_absent_image() -> None:
    with pytest.raises(TaskFailed):
        plan("docker_image", "", image=IMAGE)


def test_pull_progress_counts_layers_done_of_layers_seen() -> None:
    progress = PullProgress()
    changes = [line for line in PULL_OUTPUT.splitlines() if progress.feed(line)]
    assert len(progress.seen) == 3 and len(progress.done) == 3
    assert changes[:3] == ["4f4fb700ef54: Pulling fs layer", "9e8c1c8a3d2b: Pulling fs layer",
                           "d6e0c4b3a1f2: Pulling fs layer"]


def test_apply_pulls_with_progress_then_records_the_digest() -> None:
    result = plan("docker_image", "present=0\n", image=IMAGE)
    conn = ScriptedConnection([CommandResult(PULL_OUTPUT, "", 0), CommandResult(PRESENT, "", 0)])
    progress: list[tuple[object, ...]] = []
    applied = REGISTRY["docker_image"].apply(context(conn, progress=progress), result)
    assert applied.changed and applied.result["pinned"] == f"10.0.2.2:5000/vllm/vllm-openai@{DIGEST}"
    assert progress[-1] == (f"pulling {IMAGE}: 3 of 3 layers", 3, 3)
    assert "docker pull -- \"$IMAGE\"" in conn.scripts[0] and "/images/create" in conn.scripts[0]
    assert result.scripts[0].env == {"IMAGE": IMAGE, "FROM_IMAGE": "10.0.2.2:5000/vllm/vllm-openai",
                                      "TAG": "standin-ok"}
    assert applied.summary == f"pulled {IMAGE} ({DIGEST})" and result.summary == f"pull {IMAGE} (not present)"
    assert conn.scripts == [step.script for step in result.scripts], "it ran its plan's steps, and only them"


def test_the_engine_apis_pull_stream_gives_bytes_and_its_error_fails_the_pull() -> None:
    """The API's JSON lines as published in benchhub/benchhub pkg/common/runner/docker.md."""
    events = (FIXTURES / "docker_pull_influxdb.jsonl").read_text()
    result = plan("docker_image", "present=0\n", image=IMAGE)
    conn = ScriptedConnection([CommandResult(events, "", 0), CommandResult(PRESENT, "", 0)])
    progress: list[tuple[object, ...]] = []
    REGISTRY["docker_image"].apply(context(conn, progress=progress), result)
    description, moved, total = progress[-1]
    assert (moved, total) == (3218530 + 821033, 4335400 + 11107850)
    assert str(description).startswith(f"pulling {IMAGE}: 3.9 of 14.7 MiB") and "0 of 8 layers" in str(description)
    failing = ScriptedConnection([CommandResult(events.splitlines()[0] + '\n{"errorDetail":{"message":"manifest for '
                                            'x:1 not found"},"error":"manifest for x:1 not found"}\n', "", 1)])
    with pytest.raises(TaskFailed, match="failed \\(exit 1\\): manifest for x:1 not found"):
        REGISTRY["docker_image"].apply(context(failing), result)


def test_a_pull_through_the_cli_lets_the_host_unit_record_its_success(tmp_path) -> None:
    """With a registry login the CLI pulls (docker_pull.sh's `docker pull`); in a host unit started early
    the script runs inline, and the unit's own lines after it write the success the wait reads
    (runner/early.py, unit_script): the script must end, not replace the shell (`exec`)."""
    import os
    import subprocess

    from provision.ops.docker_image import pull_command
    from provision.runner.early import STATE_DIR, UNIT_DIR, unit_script

    home, tools = tmp_path / "home", tmp_path / "bin"
    (home / ".docker").mkdir(parents=True)
    (home / ".docker" / "config.json").write_text('{"auths": {"registry.example": {}}}')
    tools.mkdir()
    (tools / "docker").write_text("#!/bin/sh\necho \"docker $*\"\n")
    (tools / "docker").chmod(0o755)
    (tools / "systemctl").write_text("#!/bin/sh\n")
    (tools / "systemctl").chmod(0o755)
    script = unit_script("provision-early-test", pull_command(IMAGE))  # its folders here, not the machine's
    script = script.replace(STATE_DIR, str(tmp_path)).replace(UNIT_DIR, str(tmp_path / "units"))
    (tmp_path / "provision-early-test").mkdir()
    done = subprocess.run(["bash", "-s"], input=script, capture_output=True, text=True, timeout=30,
                          env={**os.environ, "HOME": str(home), "PATH": f"{tools}:{os.environ['PATH']}"})
    assert done.returncode == 0, done.stderr
    assert f"docker pull -- {IMAGE}" in done.stdout
    assert (tmp_path / "provision-early-test" / "status").read_text() == "0\n"

"""The stand-in hub serves a repository the REAL huggingface_hub client downloads, resumes and re-checks.

The hub runs in a thread of the test process on a free 127.0.0.1 port; downloads go to a temporary
cache. Requires the huggingface_hub package (the client the tool runs inside the vLLM image).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.standins.hub.cli import RunningHub, start_hub
from tests.standins.hub.server import HubOptions, read_request_log
from tests.standins.vllm.launch import start_standin

huggingface_hub = pytest.importorskip("huggingface_hub")
errors = pytest.importorskip("huggingface_hub.errors")

REPO = "cyankiwi/gemma-4-26B-A4B-it-AWQ-4bit"
MIB = 1024 * 1024


@pytest.fixture
def hub(tmp_path: Path) -> Iterator[RunningHub]:
    running = start_hub(tmp_path / "repo", shard_size=2 * MIB,
                        options=HubOptions(request_log=tmp_path / "requests.jsonl"))
    yield running
    running.stop()


def download(hub: RunningHub, cache: Path, token: str | bool = False) -> Path:
    return Path(huggingface_hub.snapshot_download(REPO, revision="main", cache_dir=cache, endpoint=hub.url,
                                                  token=token))


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def file_gets(hub: RunningHub) -> list[dict[str, object]]:
    return [r for r in hub.state.requests if r["method"] == "GET" and "/resolve/" in str(r["path"])]


def test_snapshot_download_gets_every_file_intact(hub: RunningHub, tmp_path: Path) -> None:
    snapshot = download(hub, tmp_path / "cache")
    assert snapshot.name == hub.repository.commit
    for repo_file in hub.repository.files:
        assert sha256(snapshot / repo_file.path) == sha256(hub.repository.folder / repo_file.path)
    refs = tmp_path / "cache" / f"models--{REPO.replace('/', '--')}" / "refs" / "main"
    assert refs.read_text() == hub.repository.commit
    assert read_request_log(tmp_path / "requests.jsonl") == hub.state.requests


def test_rerun_transfers_no_file(hub: RunningHub, tmp_path: Path) -> None:
    download(hub, tmp_path / "cache")
    first = len(file_gets(hub))
    assert first == len(hub.repository.files)
    download(hub, tmp_path / "cache")
    assert len(file_gets(hub)) == first


def test_dropped_connection_resumes_with_a_range_request(tmp_path: Path) -> None:
    # huggingface_hub writes in 10 MiB chunks: a drop after 11 MiB leaves 10 MiB to resume from.
    running = start_hub(tmp_path / "repo", shard_size=12 * MIB, shards=1,
                        options=HubOptions(drop_after_bytes=11 * MIB))
    try:
        snapshot = download(running, tmp_path / "cache")
        shard = "model-00001-of-00001.safetensors"
        assert sha256(snapshot / shard) == running.repository.file(shard).lfs_sha256
        gets = [r for r in file_gets(running) if str(r["path"]).endswith(shard)]
        assert [(r["range"], r["status"]) for r in gets] == [(None, 200), (f"bytes={10 * MIB}-", 206)]
        assert gets[1]["bytes_sent"] == 2 * MIB
    finally:
        running.stop()


def test_token_is_required_when_configured(tmp_path: Path) -> None:
    running = start_hub(tmp_path / "repo", shard_size=MIB, options=HubOptions(token="hf_standin"))
    try:
        with pytest.raises(errors.GatedRepoError):
            download(running, tmp_path / "cache")
        with pytest.raises(errors.HfHubHTTPError, match="Invalid credentials"):
            download(running, tmp_path / "cache", token="hf_wrong")
        download(running, tmp_path / "cache", token="hf_standin")
        assert {r["authorization"] for r in file_gets(running)} == {"valid"}
    finally:
        running.stop()


def test_resolve_headers_are_plain_http_hub_headers(hub: RunningHub) -> None:
    shard = next(f for f in hub.repository.files if f.lfs_sha256)
    request = urllib.request.Request(f"{hub.url}/{REPO}/resolve/main/{shard.path}", method="HEAD")
    with urllib.request.urlopen(request, timeout=5) as response:
        headers = response.headers
    assert headers["X-Repo-Commit"] == hub.repository.commit
    assert headers["X-Linked-Etag"] == f'"{shard.lfs_sha256}"' and headers["X-Linked-Size"] == str(shard.size)
    assert headers["Accept-Ranges"] == "bytes" and headers["Content-Length"] == str(shard.size)
    assert not [name for name in headers if name.lower().startswith("x-xet")]


def test_throttle_makes_downloads_take_time(tmp_path: Path) -> None:
    running = start_hub(tmp_path / "repo", shard_size=MIB // 2, shards=1,
                        options=HubOptions(throttle_bytes_per_s=2 * MIB))
    try:
        started = time.monotonic()
        download(running, tmp_path / "cache")
        assert time.monotonic() - started >= 0.2
    finally:
        running.stop()


def test_hf_cli_download_then_vllm_standin_serves_from_that_cache(hub: RunningHub, tmp_path: Path) -> None:
    """The tool's path: `hf download` fills HF_HOME, then the server finds the weights there."""
    hf = Path(sys.executable).with_name("hf")
    command = [str(hf)] if hf.exists() else [sys.executable, "-m", "huggingface_hub.cli.hf"]
    env = {**os.environ, "HF_ENDPOINT": hub.url, "HF_HOME": str(tmp_path / "hf"), "HF_HUB_DISABLE_UPDATE_CHECK": "1",
           "HF_HUB_DISABLE_TELEMETRY": "1"}
    env.pop("HF_TOKEN", None)
    result = subprocess.run([*command, "download", REPO, "--revision", "main"], env=env, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    serve_env = {"HF_HOME": str(tmp_path / "hf"), "STANDIN_READY_DELAY": "0.2", "STANDIN_REQUIRE_WEIGHTS": "1"}
    server = start_standin([REPO, "--kv-cache-dtype", "fp8", "--max-model-len", "32768",
                            "--limit-mm-per-prompt", '{"image":1,"video":0}'], env=serve_env)
    try:
        server.wait_ready()
        assert "Resolved architecture: Gemma4ForConditionalGeneration" in server.output()
    finally:
        server.stop()

"""`hf_snapshot`: plans from recorded probe outputs (a complete commit costs no network, a branch one API
call), and the real download script run here against the stand-in hub: HF cache layout the real client
reads offline, resume with a Range request, stop when the tool goes away, token never in an argv."""

from __future__ import annotations

import base64
import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from provision.connection.base import wrap_script
from provision.errors import CommandFailed, TaskFailed
from provision.ops import REGISTRY
from provision.ops.hf_snapshot import Download
from provision.secrets import REDACTOR
from provision.shell import PERMANENT_FAILURE
from tests.standins.hub.cli import RunningHub, start_hub
from tests.standins.hub.server import HubOptions
from tests.unit.ops_support import (
    LocalTestConnection,
    assert_bash_parses,
    context,
    make_args,
    plan,
    probe_local,
    run_local,
)

REPO = "cyankiwi/gemma-4-26B-A4B-it-AWQ-4bit"
TOKEN = "hf_unit_token_0123456789"
MIB = 1024 * 1024
COMMIT = "1" * 40
SIBLINGS = [
    {"rfilename": "config.json", "blobId": "a" * 40, "size": 100},
    {"rfilename": "sub/tokenizer.json", "blobId": "b" * 40, "size": 200},
    {"rfilename": "model.safetensors", "blobId": "c" * 40, "size": 3 * MIB,
     "lfs": {"sha256": "d" * 64, "size": 3 * MIB, "pointerSize": 130}},
]


def api(siblings: list[dict[str, object]] = SIBLINGS, commit: str = COMMIT) -> str:
    body = json.dumps({"sha": commit, "siblings": siblings})
    return f"api_status=200\napi_body={base64.b64encode(body.encode()).decode()}\napi_error=\n"


def args(**overrides: object) -> dict[str, object]:
    return {"repo": REPO, "cache_dir": "/var/lib/provision/huggingface/hub", **overrides}


def test_a_complete_commit_costs_no_network() -> None:
    result = plan("hf_snapshot", f"ref={COMMIT}\ncomplete=1\navail=100\n", **args(revision=COMMIT))
    assert not result.changed and result.result["commit"] == COMMIT
    snippet = REGISTRY["hf_snapshot"].probe(make_args("hf_snapshot", **args(revision=COMMIT))).snippet
    assert_bash_parses(snippet)


def test_a_branch_is_checked_against_the_hub_once() -> None:
    result = plan("hf_snapshot", f"ref={COMMIT}\ncomplete=1\n{api()}avail=100\n", **args())
    assert not result.changed and result.summary == f"{REPO}@{COMMIT[:12]} complete"


def test_a_moved_branch_downloads_only_the_missing_files_and_resumes_parts() -> None:
    new = "2" * 40
    state = (f"ref={COMMIT}\ncomplete=1\n{api(commit=new)}blob={'a' * 40}\t100\nblob={'d' * 64}.part\t{MIB}\n"
             f"avail={100 * MIB}\n")
    result = plan("hf_snapshot", state, **args())
    assert result.changed and result.result["commit"] == new
    [download] = result.steps
    assert isinstance(download, Download)
    assert [f.path for f in download.missing] == ["sub/tokenizer.json", "model.safetensors"]
    assert result.summary == f"download 2 of 3 files of {REPO}@{new[:12]} (2.0 MiB, resuming after 1.0 MiB)"


def test_the_hub_unreachable_uses_a_complete_cache_and_says_so() -> None:
    state = f"ref={COMMIT}\ncomplete=1\napi_status=000\napi_error={base64.b64encode(b'Connection refused').decode()}\n"
    result = plan("hf_snapshot", state, **args())
    assert not result.changed and "cannot reach https://huggingface.co" in result.summary
    assert "using the cached snapshot" in result.summary


@pytest.mark.parametrize(("status", "token", "message"), [
    ("401", None, "set hf_token"),
    ("401", TOKEN, "the token was refused"),
    ("404", None, "was not found"),
    ("000", None, "cannot reach"),
])
def test_nothing_cached_and_no_hub_fails_with_the_reason(status: str, token: str | None, message: str) -> None:
    with pytest.raises(TaskFailed, match=message):
        plan("hf_snapshot", f"ref=\ncomplete=0\napi_status={status}\n", **args(token=token))


def test_no_curl_yet_is_a_download_that_fails_clearly_unless_curl_arrives_first() -> None:
    result = plan("hf_snapshot", "ref=\ncomplete=0\napi_status=nocurl\n", **args())
    assert result.changed and "curl is not installed on the host" in result.summary
    done = run_local(result.scripts[0].script)
    assert done.rc == 1 and "curl is not installed" in done.stderr


def test_not_enough_disk_is_refused_before_downloading() -> None:
    with pytest.raises(TaskFailed, match="not enough disk"):
        plan("hf_snapshot", f"ref=\ncomplete=0\n{api()}avail={MIB}\n", **args())


def test_unsafe_file_names_from_the_hub_are_refused() -> None:
    evil = [{"rfilename": "../../etc/passwd", "blobId": "a" * 40, "size": 1}]
    with pytest.raises(TaskFailed, match=r"rfilename.*not a relative path inside the folder"):
        plan("hf_snapshot", f"ref=\ncomplete=0\n{api(evil)}avail=100\n", **args())


def test_the_token_is_in_no_script_line_that_runs_a_program_with_it() -> None:
    result = plan("hf_snapshot", f"ref=\ncomplete=0\n{api()}avail={100 * MIB}\n", **args(token=TOKEN))
    script = result.scripts[0].script
    assert_bash_parses(wrap_script(script, result.scripts[0].data))
    assert [line for line in script.splitlines() if TOKEN in line] == [
        f"auth() {{ printf '%s\\n' 'header = \"Authorization: Bearer {TOKEN}\"'; }}"]
    assert REDACTOR(result.summary) == result.summary and TOKEN not in result.scripts[0].description


@pytest.fixture
def hub(tmp_path: Path) -> Iterator[RunningHub]:
    running = start_hub(tmp_path / "repo", shard_size=MIB, shards=2, options=HubOptions(token=TOKEN))
    yield running
    running.stop()


def converge(hub: RunningHub, cache: Path, **extra: object) -> list[tuple[object, ...]]:
    """Probe, plan, apply here until converged; returns the progress reports."""
    progress: list[tuple[object, ...]] = []
    op_args = args(cache_dir=str(cache), endpoint=hub.url, token=TOKEN, token_over_http=True, **extra)
    for _ in range(5):
        result = plan("hf_snapshot", probe_local("hf_snapshot", **op_args), **op_args)
        if not result.changed:
            return progress
        try:
            REGISTRY["hf_snapshot"].apply(context(LocalTestConnection(), progress=progress), result)
        except CommandFailed:
            continue
    raise AssertionError("did not converge")


def test_download_lands_in_the_hf_cache_layout_the_real_client_reads_offline(hub: RunningHub,
                                                                              tmp_path: Path) -> None:
    huggingface_hub = pytest.importorskip("huggingface_hub")
    cache = tmp_path / "hf" / "hub"
    progress = converge(hub, cache)
    assert progress and progress[-1][1] == progress[-1][2] == sum(f.size for f in hub.repository.files)
    snapshot = Path(huggingface_hub.snapshot_download(REPO, cache_dir=cache, local_files_only=True))
    assert snapshot.name == hub.repository.commit
    for repo_file in hub.repository.files:
        assert (snapshot / repo_file.path).read_bytes() == (hub.repository.folder / repo_file.path).read_bytes()
        assert (snapshot / repo_file.path).is_symlink()
    storage = cache / f"models--{REPO.replace('/', '--')}"
    assert (storage / "refs" / "main").read_text() == hub.repository.commit
    assert not list(storage.rglob("*.part"))
    requests = len(hub.state.requests)
    assert converge(hub, cache) == [] and len(hub.state.requests) == requests + 1, "a rerun: one API call"
    assert converge(hub, cache, revision=hub.repository.commit) == []
    assert len(hub.state.requests) == requests + 1, "a complete commit: no request at all"


def test_a_dropped_download_resumes_with_a_range_request(tmp_path: Path) -> None:
    size = 3 * MIB
    running = start_hub(tmp_path / "repo", shard_size=size, shards=1,
                        options=HubOptions(drop_after_bytes=MIB + 12345))
    try:
        converge(running, tmp_path / "hub", attempts=1)
        shard = [r for r in running.state.requests if r["path"].endswith(".safetensors")]
        assert [(r["range"], r["status"]) for r in shard] == [(None, 200), (f"bytes={MIB + 12345}-", 206)]
        assert shard[1]["bytes_sent"] == size - MIB - 12345
    finally:
        running.stop()


@pytest.mark.parametrize("connections", [1, 2])
def test_the_download_stops_when_the_tool_goes_away_and_leaves_the_part(tmp_path: Path, connections: int) -> None:
    running = start_hub(tmp_path / "repo", shard_size=4 * MIB, shards=1,
                        options=HubOptions(throttle_bytes_per_s=MIB // 2))
    try:
        op_args = args(cache_dir=str(tmp_path / "hub"), endpoint=running.url, connections=connections, chunk_mib=1)
        command = plan("hf_snapshot", probe_local("hf_snapshot", **op_args), **op_args).scripts[0]
        process = subprocess.Popen(["bash", "-s"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE)
        assert process.stdin and process.stdout
        process.stdin.write(wrap_script(command.script, command.data).encode())
        process.stdin.close()
        in_shard, reports = False, 0
        while reports < 2:  # two progress reports into the shard
            line = process.stdout.readline().decode()
            in_shard = in_shard or line.startswith("file=model-")
            reports += in_shard and line.startswith("progress=")
        process.stdout.close()  # the tool is gone
        assert process.wait(timeout=10) == 141
        part = next((tmp_path / "hub").rglob("*.part"))
        size = part.stat().st_size
        time.sleep(1.5)
        assert part.stat().st_size == size and part.stat().st_blocks * 512 < 4 * MIB, "curl went on downloading"
        assert not subprocess.run(["pgrep", "-f", running.url], capture_output=True, check=False).stdout
    finally:
        running.stop()


def test_download_rate_counts_only_bytes_moved_since_the_first_report() -> None:
    from provision.ops.transfer_rate import TransferRate

    now = iter([100.0, 102.0, 102.0])
    rate = TransferRate(lambda: next(now))
    assert rate.text(50 * MIB) == ""            # resumed at 50 MiB: no rate yet
    assert rate.text(70 * MIB) == ", 10.0 MiB/s"
    assert rate.text(50 * MIB) == ""            # nothing moved


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A real 4 MiB filesystem (tmpfs), so a full disk is a full disk."""
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount)], capture_output=True,
                          check=False)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (root needed): {done.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_a_disk_filled_after_the_probe_is_reported_with_path_filesystem_free_and_needed(hub: RunningHub,
                                                                                        small_disk: Path) -> None:
    """Before: curl's "(23) Failure writing output". The free space is checked again before each file."""
    op_args = args(cache_dir=str(small_disk / "hub"), endpoint=hub.url, token=TOKEN, token_over_http=True)
    result = plan("hf_snapshot", probe_local("hf_snapshot", **op_args), **op_args)
    assert result.changed, "the probe saw enough space for the 2 MiB download"
    (small_disk / "filler").write_bytes(b"\0" * (3 * MIB + 512 * 1024))  # another process fills the disk
    with pytest.raises(CommandFailed) as failed:
        REGISTRY["hf_snapshot"].apply(context(LocalTestConnection()), result)
    message = str(failed.value)
    assert "not enough disk space for" in message and f"{small_disk}/hub/models--" in message
    assert f"(filesystem tmpfs mounted on {small_disk})" in message
    assert f"bytes free, {MIB} bytes needed" in message and "(23)" not in message


def test_ranges_cover_the_file_once_in_chunks() -> None:
    from provision.ops.hf_snapshot import split_ranges

    assert split_ranges(10, 4) == ["0-3", "4-7", "8-9"]
    assert split_ranges(8, 4) == ["0-3", "4-7"]
    assert split_ranges(3, 4) == ["0-2"]
    assert split_ranges(0, 4) == []


def test_a_large_file_comes_by_ranged_connections_at_once(tmp_path: Path) -> None:
    running = start_hub(tmp_path / "repo", shard_size=3 * MIB, shards=2)
    try:
        converge(running, tmp_path / "hub", connections=3, chunk_mib=1, parallel_files=2)
        shards = sorted((r["path"].rsplit("/", 1)[-1], r["range"], r["status"]) for r in running.state.requests
                        if r["path"].endswith(".safetensors"))
        names = sorted({name for name, _, _ in shards})
        assert shards == [(name, f"bytes={start}-{start + MIB - 1}", 206) for name in names
                          for start in (0, MIB, 2 * MIB)]
        storage = tmp_path / "hub" / f"models--{REPO.replace('/', '--')}"
        for repo_file in running.repository.files:
            snapshot = storage / "snapshots" / running.repository.commit / repo_file.path
            assert snapshot.read_bytes() == (running.repository.folder / repo_file.path).read_bytes()
        assert not list(storage.rglob("*.part")) and not list((tmp_path / ".provision").rglob(".chunks/*"))
    finally:
        running.stop()


def test_a_dropped_range_is_fetched_again_alone(tmp_path: Path) -> None:
    running = start_hub(tmp_path / "repo", shard_size=3 * MIB, shards=1, options=HubOptions(drop_after_bytes=12345))
    try:
        converge(running, tmp_path / "hub", connections=3, chunk_mib=1, attempts=1)
        shard = [(r["range"], r["status"]) for r in running.state.requests if r["path"].endswith(".safetensors")]
        assert sorted(shard[:3]) == [(f"bytes={s}-{s + MIB - 1}", 206) for s in (0, MIB, 2 * MIB)]
        assert shard[3:] == [(f"bytes=0-{MIB - 1}", 206)], "the next run asks only for the chunk it lacks"
    finally:
        running.stop()


def test_ranged_chunks_that_do_not_hash_to_the_listed_sha256_are_never_renamed_into_place(tmp_path: Path) -> None:
    running = start_hub(tmp_path / "repo", shard_size=2 * MIB, shards=1)
    try:
        op_args = args(cache_dir=str(tmp_path / "hub"), endpoint=running.url, connections=2, chunk_mib=1, attempts=1)
        shard = next(f for f in running.repository.files if f.lfs_sha256)
        storage = tmp_path / "hub" / f"models--{REPO.replace('/', '--')}"
        (storage / "blobs").mkdir(parents=True)
        (storage / "blobs" / f"{shard.etag}.part").write_bytes(b"\1" * shard.size)  # every chunk "done", wrong
        marks = tmp_path / ".provision" / storage.name / ".chunks" / shard.etag
        marks.mkdir(parents=True)
        for name in ("0-1048575", "1048576-2097151"):
            (marks / name).touch()
        result = plan("hf_snapshot", probe_local("hf_snapshot", **op_args), **op_args)
        assert "resuming after 2.0 MiB" in result.summary
        with pytest.raises(CommandFailed, match=f"its hash [0-9a-f]{{64}} is not the hub's {shard.etag}") as failed:
            REGISTRY["hf_snapshot"].apply(context(LocalTestConnection()), result)
        assert failed.value.exit_code == PERMANENT_FAILURE, "every attempt got the whole file, and it is wrong"
        assert not (storage / "blobs" / shard.etag).exists() and not marks.exists()
        assert not (storage / "blobs" / f"{shard.etag}.part").exists()
    finally:
        running.stop()


@pytest.mark.parametrize("connections", [1, 2])
@pytest.mark.parametrize(("status", "for_good"), [(404, True), (403, True), (408, False), (429, False), (503, False)])
def test_a_file_the_hub_refuses_fails_for_good_and_a_passing_refusal_is_retried(
        tmp_path: Path, status: int, for_good: bool, connections: int) -> None:
    """The exit status tells the host unit of an early start (runner/early.py) whether to start again:
    PERMANENT_FAILURE at the first 4xx answer (but 408 and 429), naming the file's URL and the status;
    1 after every attempt for the others. One file refused stops the others."""
    running = start_hub(tmp_path / "repo", shard_size=2 * MIB, shards=1)
    shard = next(f.path for f in running.repository.files if f.lfs_sha256)
    running.state.options.refuse[shard] = status
    try:
        op_args = args(cache_dir=str(tmp_path / "hub"), endpoint=running.url, attempts=2, connections=connections,
                       chunk_mib=1)
        result = plan("hf_snapshot", probe_local("hf_snapshot", **op_args), **op_args)
        with pytest.raises(CommandFailed) as failed:
            REGISTRY["hf_snapshot"].apply(context(LocalTestConnection()), result)
        asked = [r for r in running.state.requests if r["path"].endswith(shard)]
        url = f"{running.url}/{REPO}/resolve/{running.repository.commit}/{shard}"
        if for_good:
            assert failed.value.exit_code == PERMANENT_FAILURE, failed.value.stderr
            assert f"downloading {shard} failed for good: HTTP {status} from {url}" in failed.value.stderr
            assert len(asked) == connections, "refused: no second attempt"
        else:
            assert failed.value.exit_code == 1 and len(asked) == 2 * connections, failed.value.stderr
    finally:
        running.stop()


@pytest.mark.parametrize(("key", "value"), [("connections", 0), ("parallel_files", 17), ("chunk_mib", 0)])
def test_download_settings_out_of_range_are_refused(key: str, value: int) -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match=key):
        make_args("hf_snapshot", **args(**{key: value}))


def test_a_ranged_part_counts_the_bytes_it_holds_not_its_length() -> None:
    """A chunk written at the end of an empty .part makes it long but sparse: find's %b says so."""
    from provision.ops.hf_snapshot import parse_cache_state

    state = parse_cache_state(f"complete=0\nblob={'d' * 64}.part\t{3 * MIB}\t2048\nblob={'e' * 64}.part\t{MIB}\n")
    assert state.held(f"{'d' * 64}.part", 3 * MIB) == MIB          # 2048 blocks of 512 bytes
    assert state.held(f"{'e' * 64}.part", 3 * MIB) == MIB          # an older probe's line: its length
    assert state.held(f"{'f' * 64}.part", 3 * MIB) == 0

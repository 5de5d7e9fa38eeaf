"""Values from outside that reach a root script (issue 19, "Data is data"): the hub's file list (or the
office cache's plain-HTTP mirror, which anyone on the LAN can impersonate), a bundle's manifest, an
apt repository's URLs. Each is checked against its format and refused naming where it came from and
the field, or it is quoted so that the script, run here with bash, treats it as data: the marker
file a hostile value would create never appears."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from provision.bundle.manifest import Manifest
from provision.errors import InputError, TaskFailed
from provision.ops import REGISTRY
from provision.ops.apt_repository import download_script, render_sources
from provision.ops.bundle_copy import BundleFile, finish_script
from provision.ops.hf_snapshot import Download
from tests.standins.hub.cli import start_hub
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
from tests.unit.security.target_syntax import apt_sources_uris, read_stanza
from tests.unit.test_ops_hf_snapshot import MIB
from tests.unit.test_ops_hf_snapshot import REPO as HUB_REPO

MIRROR = "http://office-cache.lan:8080"
COMMIT = "1" * 40
GOOD_BLOB = "a" * 40
GOOD_SHA256 = "d" * 64


def listing(siblings: list[dict[str, object]], commit: str = COMMIT) -> str:
    body = json.dumps({"sha": commit, "siblings": siblings})
    return f"ref=\ncomplete=0\napi_status=200\napi_body={base64.b64encode(body.encode()).decode()}\napi_error=\n"


def hub_args(cache: str = "/var/lib/provision/huggingface/hub", **extra: object) -> dict[str, object]:
    return {"repo": "org/model", "cache_dir": cache, "endpoint": MIRROR, **extra}


def injection(marker: Path) -> str:
    return f"$(touch {marker})"


@pytest.mark.parametrize(("sibling", "field"), [
    ({"rfilename": "config.json", "blobId": "a;touch /tmp/pwned;#", "size": 1}, "blobId"),
    ({"rfilename": "config.json", "blobId": "$(touch /tmp/pwned)", "size": 1}, "blobId"),
    ({"rfilename": "config.json", "blobId": "a" * 39, "size": 1}, "blobId"),
    ({"rfilename": "m.safetensors", "blobId": GOOD_BLOB, "size": 1, "lfs": {"sha256": "`reboot`"}}, "lfs.sha256"),
    ({"rfilename": "m.safetensors", "blobId": GOOD_BLOB, "size": 1, "lfs": {"sha256": GOOD_BLOB}}, "lfs.sha256"),
    ({"rfilename": "a\nb", "blobId": GOOD_BLOB, "size": 1}, "rfilename"),
    ({"rfilename": "a\x1b[2Jb", "blobId": GOOD_BLOB, "size": 1}, "rfilename"),
    ({"rfilename": "../../../root/.ssh/authorized_keys", "blobId": GOOD_BLOB, "size": 1}, "rfilename"),
    ({"rfilename": "/etc/cron.d/x", "blobId": GOOD_BLOB, "size": 1}, "rfilename"),
    ({"rfilename": "a//b", "blobId": GOOD_BLOB, "size": 1}, "rfilename"),
])
def test_a_hostile_mirror_listing_is_refused_naming_the_mirror_and_the_field(sibling: dict[str, object],
                                                                              field: str) -> None:
    with pytest.raises(TaskFailed) as refused:
        plan("hf_snapshot", listing([sibling]) + "avail=1000000\n", **hub_args())
    assert MIRROR in str(refused.value) and field in str(refused.value)


@pytest.mark.parametrize("size", ["1; touch /tmp/pwned", -1, True, 1.5])
def test_a_size_that_is_not_a_byte_count_is_refused(size: object) -> None:
    with pytest.raises(TaskFailed, match="size"):
        plan("hf_snapshot", listing([{"rfilename": "c", "blobId": GOOD_BLOB, "size": size}]) + "avail=9\n",
             **hub_args())


def test_a_commit_that_is_not_a_sha_is_refused() -> None:
    with pytest.raises(TaskFailed, match=f"{MIRROR}.*field sha"):
        plan("hf_snapshot", listing([], commit="$(touch /tmp/pwned)") + "avail=9\n", **hub_args())


def test_an_etag_sent_quoted_or_in_capitals_is_the_hex_it_names() -> None:
    sibling = {"rfilename": "c", "blobId": f'"{"AB" * 20}"', "size": 1}
    result = plan("hf_snapshot", listing([sibling]) + "avail=9\n", **hub_args())
    [download] = result.steps
    assert isinstance(download, Download) and download.files[0].etag == "ab" * 20


def test_file_names_the_hub_allows_stay_data_in_the_root_script(tmp_path: Path) -> None:
    """Spaces, quotes, `$( )` and `;` are legal in a repository's file names: quoted, never run."""
    marker = tmp_path / "marker"
    names = [f"dir with space/{injection(marker)}.json", "it's \"quoted\"; `id`.txt", "$HOME*.bin"]
    siblings = [{"rfilename": name, "blobId": f"{index:040x}", "size": 3} for index, name in enumerate(names)]
    blobs = "".join(f"blob={index:040x}\t3\n" for index in range(len(names)))  # present: only links are made
    cache = tmp_path / "hub"
    result = plan("hf_snapshot", listing(siblings) + blobs + "avail=9\n", **hub_args(str(cache), revision="main"))
    command = result.scripts[0]
    done = run_local(command.script, command.data)
    assert done.rc == 0, done.stderr
    snapshot = cache / "models--org--model" / "snapshots" / COMMIT
    assert sorted(str(p.relative_to(snapshot)) for p in snapshot.rglob("*") if p.is_symlink()) == sorted(names)
    assert not marker.exists()


@pytest.mark.parametrize("revision", ["main\nrm -rf /", "--upload-pack=x", "../../etc", "a..b", "main\x00",
                                      "refs/heads/x.lock", "main @{1}"])
def test_a_revision_is_a_commit_or_a_valid_ref_name(revision: str) -> None:
    with pytest.raises(ValueError, match="is not a revision"):
        make_args("hf_snapshot", **hub_args(revision=revision))


def test_the_endpoint_is_one_url_without_line_breaks() -> None:
    with pytest.raises(ValueError, match="not a URL"):
        make_args("hf_snapshot", **hub_args(endpoint="http://cache.lan\nhttp://evil"))


def test_a_refs_file_read_back_from_the_host_is_a_commit_or_nothing() -> None:
    """Offline, a complete cached snapshot is used; a refs file on the host that names no commit is
    not taken as one (its text would become the registered `commit` and the snapshot path)."""
    with pytest.raises(TaskFailed, match="cannot reach"):
        plan("hf_snapshot", "ref=$(touch /tmp/pwned)\ncomplete=1\napi_status=000\navail=9\n", **hub_args())


def test_a_token_with_quotes_and_backslashes_reaches_the_hub_intact(tmp_path: Path) -> None:
    """curl reads the token's header from a config (never an argv): quoted for curl's config syntax,
    a `"` in it no longer ends the value (the rest was read as more of the config)."""
    token = 'hf_a"b\\c -o /tmp/pwned'
    hub = start_hub(tmp_path / "repo", shard_size=MIB, shards=1, options=HubOptions(token=token))
    try:
        cache = tmp_path / "hf" / "hub"
        # the stand-in hub is plain http: the token goes to it only when marked trusted
        op_args = {"repo": HUB_REPO, "cache_dir": str(cache), "endpoint": hub.url, "token": token,
                   "token_over_http": True}
        result = plan("hf_snapshot", probe_local("hf_snapshot", **op_args), **op_args)
        [download] = result.steps
        assert result.changed and isinstance(download, Download) and len(download.files) == len(hub.repository.files)
        REGISTRY["hf_snapshot"].apply(context(LocalTestConnection()), result)
        assert not plan("hf_snapshot", probe_local("hf_snapshot", **op_args), **op_args).changed
    finally:
        hub.stop()


def manifest_json(**changes: object) -> str:
    data = {"format": 1, "files": {"key.asc": {"size": 3, "sha256": GOOD_SHA256}},
            "images": {"vllm:1": {"file": "images/vllm.tar", "id": "sha256:" + "e" * 64, "hosts": []}}}
    data.update(changes)
    return json.dumps(data)


@pytest.mark.parametrize("changes", [
    {"files": {"key.asc": {"size": 3, "sha256": "$(touch /tmp/pwned)"}}},
    {"files": {"key.asc": {"size": 3, "sha256": GOOD_SHA256 + "\nrm -rf /"}}},
    {"files": {"key.asc": {"size": "3; reboot", "sha256": GOOD_SHA256}}},
    {"files": {"../../etc/sudoers.d/x": {"size": 3, "sha256": GOOD_SHA256}}},
    {"files": {"/root/.ssh/authorized_keys": {"size": 3, "sha256": GOOD_SHA256}}},
    {"files": {"a\nb": {"size": 3, "sha256": GOOD_SHA256}}},
    {"images": {"vllm:1": {"file": "images/vllm.tar", "id": "sha256:x'; reboot; '", "hosts": []}}},
    {"images": {"vllm:1": {"file": "../../x.tar", "id": "sha256:" + "e" * 64, "hosts": []}}},
    {"urls": {"https://x/key": {"file": "/etc/shadow", "hosts": []}}},
])
def test_a_hostile_bundle_manifest_is_refused_as_not_a_manifest(changes: dict[str, object]) -> None:
    with pytest.raises(InputError, match="not a bundle manifest"):
        Manifest.from_json(manifest_json(**changes), "desk-1:/mnt/bundle/manifest.json")


def test_bundle_copy_takes_only_a_hex_sha256_and_compares_it_quoted(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="sha256"):
        BundleFile(path="key.asc", size=3, sha256="x; touch /tmp/pwned")
    (tmp_path / "it's.part").write_text("abc")
    good = BundleFile(path="it's", size=3, sha256="ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
    done = run_local(finish_script(str(tmp_path), good).replace("chown root:root", "true"))
    assert done.rc == 0, done.stderr
    assert (tmp_path / "it's").read_text() == "abc"


APT_SOURCE = {"name": "docker", "suites": ["bookworm"], "components": ["stable"],
              "key_url": "https://download.docker.com/linux/debian/gpg"}


@pytest.mark.parametrize("changes", [
    {"uris": ["https://mirror.lan/docker\nTrusted: yes"]},
    {"uris": ["https://mirror.lan/docker Trusted: yes"]},
    {"uris": ["-K/etc/shadow"]},
    {"suites": ["stable\nTrusted: yes"]},
    {"components": ["main\r\nTrusted: yes"]},
    {"architectures": ["amd64\nSigned-By: /tmp/evil.gpg"]},
    {"key_url": "-K/etc/shadow"},
    {"key_url": "--config=/etc/shadow"},
    {"key_url": "https://x/gpg\nTrusted: yes"},
])
def test_a_hostile_apt_repository_value_is_refused(changes: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        make_args("apt_repository", **{"uris": ["https://mirror.lan/docker"], **APT_SOURCE, **changes})


def test_the_keyring_package_url_is_a_url() -> None:
    with pytest.raises(ValueError, match="not a URL"):
        make_args("apt_repository", name="cuda", keyring_package_url="-o/etc/cron.d/x cuda-keyring_1.1-1_all.deb")


def test_a_sources_file_apt_reads_as_exactly_the_repositories_given(tmp_path: Path) -> None:
    uris = ["https://mirror.lan/docker?a=1&b='q'", "file:/var/lib/provision/bundle/apt"]
    args = make_args("apt_repository", **{**APT_SOURCE, "uris": uris, "key_url": "https://x/gpg?'$(id)'"})
    text = render_sources(args, ["amd64"])
    sources = tmp_path / "docker.sources"
    sources.write_text(text)
    assert set(read_stanza(text)) == {"Types", "URIs", "Suites", "Components", "Architectures", "Signed-By"}
    assert read_stanza(text)["URIs"].split() == uris
    assert apt_sources_uris(sources, tmp_path) == sorted(uri.rstrip("/") + "/" for uri in uris)


def test_curl_is_told_where_its_options_end_before_the_url(tmp_path: Path) -> None:
    """A URL is never read as a curl option, even one that passed as `scheme:...`."""
    script = download_script("file:-K/etc/passwd", str(tmp_path / "key.gpg"), None, dearmor_keys=False)
    assert_bash_parses(script)
    assert "-o \"$part.raw\" -- 'file:-K/etc/passwd'" in script

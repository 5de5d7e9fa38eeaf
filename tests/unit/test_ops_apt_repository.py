"""`apt_repository`: deb822 source + keyring plans from recorded probes; dearmoring checked for real."""

from __future__ import annotations

import base64
import hashlib

import pytest

from provision.ops.apt import APT_GET
from provision.ops.apt_repository import dearmor, download_script, render_sources
from provision.ops.apt_update import apt_update_script
from tests.unit.ops_support import assert_commands_parse, facts, make_args, plan, run_local, script_of

# a stand-in repository key made for these tests (gpg --quick-gen-key, ed25519); gpg --dearmor of it
# has this sha256:
TEST_KEY = """-----BEGIN PGP PUBLIC KEY BLOCK-----

mDMEaw2Q5RYJKwYBBAHaRw8BAQdAVM8TBMctkBybzJqbVRD7mUkFldyOR7ZdAnQK
PYL1o3O0N3Byb3Zpc2lvbiB0ZXN0IHJlcG9zaXRvcnkgKHN0YW5kLWluKSA8dGVz
dEBsYWIuaW52YWxpZD6IkAQTFggAOBYhBAqpTReU2J7QIzUdzZAdopBK+m6nBQJr
DZDlAhsDBQsJCAcCBhUKCQgLAgQWAgMBAh4BAheAAAoJEJAdopBK+m6niYgA/0sI
ERDvyiGSYzxh637wymZAIk/MlS40VLxcMw6Jp1LIAQDeqAJ9jqdv6kQhGgnwnO+Y
SfByxf56C2aDCsCtKOySAQ==
=1syj
-----END PGP PUBLIC KEY BLOCK-----
"""
TEST_KEYRING_SHA256 = "73f6d3f5e902ff888a161d117ec867812094fd5e1def823d4a9cc2b516c56f52"
LAB = facts(arch="x86_64")
TOOLKIT = {
    "name": "nvidia-container-toolkit",
    "uris": "https://nvidia.github.io/libnvidia-container/stable/deb/amd64",
    "suites": "/",
}
DOCKER = {"name": "docker", "uris": ["https://download.docker.com/linux/debian"], "suites": ["bookworm"],
          "components": ["stable"], "key_file": TEST_KEY}


def sources_state(text: str) -> str:
    return f"sources={base64.b64encode(text.encode()).decode()}\n"


def test_dearmor_matches_gpg() -> None:
    assert hashlib.sha256(dearmor(TEST_KEY)).hexdigest() == TEST_KEYRING_SHA256
    assert hashlib.sha256(dearmor(TEST_KEY.replace("\n", "\r\n"))).hexdigest() == TEST_KEYRING_SHA256


def test_sources_file_is_deb822_with_the_facts_architecture() -> None:
    args = make_args("apt_repository", **DOCKER)
    text = render_sources(args, ["amd64"])
    assert text.splitlines()[1:] == [
        "Types: deb",
        "URIs: https://download.docker.com/linux/debian",
        "Suites: bookworm",
        "Components: stable",
        "Architectures: amd64",
        "Signed-By: /usr/share/keyrings/docker.gpg",
    ]


def test_new_repository_with_key_file_writes_keyring_then_source_and_updates() -> None:
    result = plan("apt_repository", "", LAB, **DOCKER)
    assert result.changed
    key_write, source_write = result.commands
    assert hashlib.sha256(key_write.data or b"").hexdigest() == TEST_KEYRING_SHA256
    assert "mv -f -- \"$tmp\" '/usr/share/keyrings/docker.gpg'" in key_write.script
    assert "mv -f -- \"$tmp\" '/etc/apt/sources.list.d/docker.sources'" in source_write.script
    assert source_write.script.endswith(apt_update_script(APT_GET))
    assert "+Architectures: amd64" in result.diff and result.diff.startswith("--- /dev/null")
    assert "Signed-By" not in script_of(result)  # the content travels as payload
    assert_commands_parse(result)


def test_converged_repository_plans_nothing() -> None:
    args = make_args("apt_repository", **DOCKER)
    state = sources_state(render_sources(args, ["amd64"])) + f"keyring_sha256={TEST_KEYRING_SHA256}\n"
    result = plan("apt_repository", state, LAB, **DOCKER)
    assert not result.changed and result.commands == []


def test_changed_components_rewrite_the_source_only() -> None:
    args = make_args("apt_repository", **DOCKER)
    state = sources_state(render_sources(args, ["amd64"])) + f"keyring_sha256={TEST_KEYRING_SHA256}\n"
    result = plan("apt_repository", state, LAB, **{**DOCKER, "components": ["stable", "test"]})
    assert len(result.commands) == 1
    assert "-Components: stable\n+Components: stable test" in result.diff


def test_key_url_downloads_when_the_keyring_is_missing_or_the_source_changed() -> None:
    args = {**TOOLKIT, "key_url": "https://nvidia.github.io/libnvidia-container/gpgkey"}
    result = plan("apt_repository", "", LAB, **args)
    download = result.commands[0].script
    assert "curl -fsSL --retry 3" in download and "-o \"$part.raw\"" in download
    assert "base64 -d" in download
    assert "Components" not in (result.commands[1].data or b"").decode()
    assert_commands_parse(result)
    text = render_sources(make_args("apt_repository", **args), ["amd64"])
    assert "# key: https://nvidia.github.io/libnvidia-container/gpgkey" in text
    converged = sources_state(text) + "keyring_sha256=abc\n"
    assert not plan("apt_repository", converged, LAB, **args).changed
    only_key_missing = plan("apt_repository", sources_state(text), LAB, **args)
    assert len(only_key_missing.commands) == 2 and only_key_missing.diff == ""


def test_architecture_is_left_out_when_facts_do_not_know_it() -> None:
    result = plan("apt_repository", "", facts(), **DOCKER)
    assert "Architectures" not in (result.commands[1].data or b"").decode()


def test_keyring_package_converges_on_its_version() -> None:
    args = {"name": "cuda", "keyring_package_url":
            "https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/cuda-keyring_1.1-1_all.deb"}
    assert not plan("apt_repository", "keyring_package=1.1-1\tii \n", LAB, **args).changed
    result = plan("apt_repository", "keyring_package=1.0-1\tii \n", LAB, **args)
    script = script_of(result)
    assert "'/var/cache/provision/cuda-keyring_1.1-1.deb.part'" in script
    assert f"{APT_GET} install --allow-downgrades -- '/var/cache/provision/cuda-keyring_1.1-1.deb'" in script
    assert script.endswith(apt_update_script(APT_GET))
    assert "(was 1.0-1)" in result.summary
    assert_commands_parse(result)


def test_absent_removes_source_and_key() -> None:
    args = {"name": "docker", "state": "absent"}
    result = plan("apt_repository", sources_state("Types: deb\n") + "keyring_sha256=abc\n", LAB, **args)
    assert "rm -f -- '/etc/apt/sources.list.d/docker.sources'" in script_of(result)
    assert not plan("apt_repository", "", LAB, **args).changed


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="exactly one of"):
        make_args("apt_repository", **{**DOCKER, "key_url": "https://x/key"})
    with pytest.raises(ValueError, match="takes no components"):
        make_args("apt_repository", **{**TOOLKIT, "components": ["main"], "key_file": TEST_KEY})
    with pytest.raises(ValueError, match="apt ignores others"):
        make_args("apt_repository", **{**DOCKER, "name": "docker.list~"})
    with pytest.raises(ValueError, match="ASCII-armored"):
        make_args("apt_repository", **{**DOCKER, "key_file": "not a key"})
    with pytest.raises(ValueError, match="cannot read package and version"):
        make_args("apt_repository", name="x", keyring_package_url="https://x/keyring.deb")


def test_download_dearmors_verifies_and_renames_for_real(tmp_path) -> None:
    armored = tmp_path / "gpgkey"
    armored.write_text(TEST_KEY)
    dest = tmp_path / "keyrings" / "test.gpg"
    url = f"file://{armored}"
    good = hashlib.sha256(TEST_KEY.encode()).hexdigest()
    output = run_local(download_script(url, str(dest), good, dearmor_keys=True))
    assert output.rc == 0, output.stderr
    assert hashlib.sha256(dest.read_bytes()).hexdigest() == TEST_KEYRING_SHA256
    assert sorted(p.name for p in dest.parent.iterdir()) == ["test.gpg"]
    dest.unlink()
    output = run_local(download_script(url, str(dest), "0" * 64, dearmor_keys=True))
    assert output.rc != 0 and not dest.exists(), "a download with the wrong checksum must not be installed"

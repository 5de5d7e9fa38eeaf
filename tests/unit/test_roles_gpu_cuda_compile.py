"""The CUDA toolkit is checked by compiling (issue 21, item 9): `nvcc --version` passed where nothing
compiles. CUDA before 13 on glibc 2.41 or newer (Debian 13) fails every compile ("exception
specification is incompatible with that of previous function "cospi"", NVIDIA/cuda-samples#378; 12.9.1
too, LostRuins/koboldcpp#1521): preflight refuses it before anything changes, unless the user says the
headers are patched. nvcc needs a host compiler: g++ is installed with the toolkit.

The compile check's own command runs here against the stand-in nvcc (tests/standins/nvidia/payload/nvcc,
which compiles host code with this machine's g++ and fails as the reports show on glibc 2.41)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from provision.facts.model import OsInfo
from tests.standins.nvidia import catalogue
from tests.standins.nvidia.payload import render
from tests.unit.test_roles_gpu_support import facts, render_tasks, site_play

FRESH_DEBIAN = "debian12-rtx5090-standin-fresh.txt"
TRIXIE = OsInfo(id="debian", version_id="13", codename="trixie", pretty="Debian GNU/Linux 13 (trixie)")
REFUSAL = "the CUDA toolkit can compile on this glibc"
COMPILE = "nvcc compiles and links a CUDA program"


def on_trixie(**host_vars: object) -> dict:
    return render_tasks(facts(FRESH_DEBIAN, os=TRIXIE), nvidia_debian13_sha1_ok=True, **host_vars)


def test_cuda_12_on_debian_13_is_refused_naming_the_cause_and_the_ways_out() -> None:
    refusal = on_trixie()[REFUSAL]
    assert refusal.active
    msg = refusal.args.msg
    assert "Debian GNU/Linux 13 (trixie) has glibc 2.41, and CUDA 12.9's headers" in msg
    assert "NVIDIA/cuda-samples#378" in msg and '"cospi"' in msg
    for way_out in ("cuda_toolkit_enabled: false", "CUDA 13 toolkit", "cuda_toolkit_headers_patched: true"):
        assert way_out in msg


@pytest.mark.parametrize("host_vars", [{"cuda_toolkit_headers_patched": True}, {"cuda_toolkit_enabled": False},
                                       {"cuda_toolkit_version": "13.0", "cuda_toolkit_package": "cuda-toolkit-13-0"}])
def test_patched_headers_no_toolkit_or_cuda_13_pass_on_debian_13(host_vars: dict) -> None:
    assert on_trixie(**host_vars)[REFUSAL].skipped


@pytest.mark.parametrize("os_info", [None, OsInfo(id="ubuntu", version_id="24.04", codename="noble",
                                                  pretty="Ubuntu 24.04.3 LTS")])
def test_older_glibc_releases_are_not_refused(os_info: OsInfo | None) -> None:
    host = facts(FRESH_DEBIAN) if os_info is None else facts(FRESH_DEBIAN, os=os_info)
    assert render_tasks(host)[REFUSAL].skipped


def test_the_glibc_of_this_release_is_what_the_table_says() -> None:
    """This machine is one of the supported releases: its own glibc against preflight's table."""
    release = dict(line.split("=", 1) for line in Path("/etc/os-release").read_text().splitlines() if "=" in line)
    os_id, version = release["ID"].strip('"'), release.get("VERSION_ID", "").strip('"')
    glibc = site_play().defaults["preflight_glibc"]
    if version not in glibc.get(os_id, {}):
        pytest.skip(f"{os_id} {version} is not a supported release")
    found = subprocess.run(["getconf", "GNU_LIBC_VERSION"], capture_output=True, text=True, check=True).stdout
    assert found.strip() == f"glibc {glibc[os_id][version]}"


def test_the_host_compiler_is_installed_with_the_toolkit() -> None:
    assert render_tasks(facts(FRESH_DEBIAN))["CUDA toolkit installed"].args.name == ["cuda-toolkit-12-9", "g++"]


def run_compile_check(tmp_path: Path, glibc: str = "", compiler: bool = True) -> subprocess.CompletedProcess[str]:
    """The role's check command with the stand-in nvcc on PATH; `bash -lc` keeps that PATH (a login
    shell would read /etc/profile, which knows nothing of this folder)."""
    tools = tmp_path / "bin"
    tools.mkdir()
    toolkit = catalogue.CUDA_TOOLKIT
    nvcc = render("nvcc", CUDA_RELEASE=toolkit.dotted, NVCC_VERSION_TEXT=toolkit.nvcc_version_text)
    (tools / "nvcc").write_bytes(nvcc)
    (tools / "bash").write_text('#!/bin/sh\n[ "$1" = -lc ] && shift\nexec /bin/bash -c "$@"\n')
    if glibc:
        (tools / "getconf").write_text(f"#!/bin/sh\necho 'glibc {glibc}'\n")
    for tool in tools.iterdir():
        tool.chmod(0o755)
    path = [str(tools), *os.environ["PATH"].split(":")]
    if not compiler:  # only what the check and nvcc use besides the compiler
        for tool in ("sh", "mkdir", "mktemp", "rm", "cat", "getconf"):
            (tools / tool).symlink_to(shutil.which(tool) or tool)
        path = [str(tools)]
    cmd = render_tasks(facts(FRESH_DEBIAN), cuda_toolkit_check_dir=str(tmp_path / "check"))[COMPILE].args.cmd
    return subprocess.run(["/bin/sh", "-c", cmd], env={"PATH": ":".join(path)}, capture_output=True, text=True,
                          check=False)


@pytest.mark.skipif(shutil.which("g++") is None, reason="the stand-in nvcc compiles with this machine's g++")
def test_the_compile_check_compiles_and_runs_a_program(tmp_path: Path) -> None:
    result = run_compile_check(tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == "compiled by nvcc, runs: 1.5"


def test_the_compile_check_fails_on_glibc_2_41_as_reported(tmp_path: Path) -> None:
    result = run_compile_check(tmp_path, glibc="2.41")
    assert result.returncode != 0
    assert ('error: exception specification is incompatible with that of previous function "cospi" (declared at '
            "line 2601 of /usr/local/cuda-12.9/bin/../targets/x86_64-linux/include/crt/math_functions.h)"
            ) in result.stdout
    assert result.stdout.rstrip().endswith('3 errors detected in the compilation of "probe.cu".')


def test_the_compile_check_fails_without_a_host_compiler(tmp_path: Path) -> None:
    result = run_compile_check(tmp_path, compiler=False)
    assert result.returncode != 0 and "g++" in result.stdout


@pytest.mark.skipif(shutil.which("g++") is None, reason="the stand-in nvcc compiles with this machine's g++")
def test_the_compile_check_builds_where_programs_may_run_and_leaves_nothing(tmp_path: Path) -> None:
    """Not in /tmp: docker's --tmpfs (the lab's hosts) and hardened laptops mount it noexec, and the
    program then cannot run ("./probe: Permission denied", seen on the lab's Debian 12 host)."""
    cmd = render_tasks(facts(FRESH_DEBIAN))[COMPILE].args.cmd
    assert "mktemp -d -- '/var/lib/provision/cuda-check/probe.XXXXXX'" in cmd
    assert run_compile_check(tmp_path).returncode == 0
    assert list((tmp_path / "check").iterdir()) == []

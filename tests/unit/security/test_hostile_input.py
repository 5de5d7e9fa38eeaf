"""Hostile input gets exit 2 naming the file, the line and the limit: never a traceback, a hang or all
the controller's memory (issue 19, build item 6).

Every case runs the real CLI (`python -m provision`) in a subprocess whose address space is capped at
`MEMORY_BOUND` (a 4 KB alias bomb took 7.6 GB before it was bounded: under the cap the old code
dies of a MemoryError, a traceback) and whose wall time is capped at `TIME_BOUND` (a FIFO as the
inventory, a chain of 3000 groups, a loop of aliases used to hang). Its working directory is the
case's own folder, so the shipped playbook and roles are used.
"""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
MEMORY_BOUND = 1 << 30
TIME_BOUND = 10.0  # seconds: the CLI starts in under one; a bounded refusal adds little

# nine levels of ten aliases: 10^9 values from 400 bytes (the "billion laughs")
BOMB = "\n".join(["a: &a [x, x, x, x, x, x, x, x, x, x]"]
                 + [f"{name}: &{name} [{', '.join([f'*{previous}'] * 10)}]"
                    for previous, name in zip("abcdefgh", "bcdefghi", strict=True)])
ALIAS_LIMIT = "more than 400,000 values (the limit"
DEPTH_LIMIT = "nested deeper than 100 levels of lists and mappings (the limit)"
HOSTS_LIMIT = "more than 10,000 hosts, the limit for one pattern"
SIZE_LIMIT = "larger than 16 MiB, the limit for an input file"
HOST_FILE = "address: 127.0.0.1\nuser: ops\n"
NOBODY_LISTENS = "address: 127.0.0.1\nport: 1\nuser: ops\n"  # connection refused at once


def write(folder: Path, name: str, text: str | bytes) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return path


def indented(text: str, spaces: int) -> str:
    return text.replace("\n", "\n" + " " * spaces)


def sparse(folder: Path, name: str, size: int = 3 << 30) -> Path:
    """A file of `size` bytes that takes no disk (read whole, it takes `size` of memory)."""
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as handle:
        handle.truncate(size)
    return path


def fifo(folder: Path, name: str) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(path)
    return path


def link(folder: Path, name: str, target: Path | str) -> Path:
    """A symbolic link `folder/name` -> `target` (which need not exist)."""
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.symlink_to(target)
    return path


def ini(folder: Path) -> str:
    return str(write(folder, "hosts.ini", "lab1\n"))


def with_group_vars(folder: Path, make: Callable[[Path], object]) -> list[str]:
    make(folder)
    return ["inventory", "--list", "-i", ini(folder)]


def roles_with_bombed_defaults(folder: Path) -> list[str]:
    shutil.copytree(REPO / "roles", folder / "roles")
    write(folder, "roles/docker/defaults.yaml", BOMB + "\n")
    return ["up", "--list-tasks", "--roles-path", str(folder / "roles"), str(write(folder, "host.yaml", HOST_FILE))]


def inventory_folder_linked_inside_itself(folder: Path) -> list[str]:
    write(folder, "inventory/hosts.ini", "lab1\n")
    link(folder, "inventory/again", folder / "inventory")
    return ["inventory", "--list", "-i", str(folder / "inventory")]


def group_vars_folder_with(folder: Path, name: str, target: Path | str) -> None:
    write(folder, "group_vars/all/ok.yaml", "a: 1\n")
    link(folder, f"group_vars/all/{name}", target)


def deep_group_chain(folder: Path) -> list[str]:
    text = "".join(f"[g{n}:children]\ng{n + 1}\n" for n in range(3000)) + "[g3000]\nlab1\n"
    return ["inventory", "--list", "-i", str(write(folder, "hosts.ini", text))]


def bundle_with_deep_manifest(folder: Path) -> list[str]:
    write(folder, "bundle/manifest.json", '{"a": ' + "[" * 100_000 + "]" * 100_000 + "}")
    host = write(folder, "host.yaml", "address: 127.0.0.1\nconnection: local\n")
    return ["up", "--check", "--bundle", str(folder / "bundle"), str(host)]


@dataclass(frozen=True)
class Case:
    argv: Callable[[Path], list[str]]
    expected: tuple[str, ...]  # in stderr; {tmp} is the case's folder


CASES: dict[str, Case] = {
    # alias expansion, everywhere YAML is read
    "alias bomb in host.yaml": Case(
        lambda d: ["vars", str(write(d, "host.yaml", HOST_FILE + "vars:\n  " + indented(BOMB, 2) + "\n"))],
        ("{tmp}/host.yaml:9:", ALIAS_LIMIT)),
    "alias bomb in a fleet inventory": Case(
        lambda d: ["inventory", "--list", "-i", str(write(
            d, "fleet.yaml", "all:\n  vars:\n    " + indented(BOMB, 4) + "\n  hosts:\n    lab1:\n"))],
        ("{tmp}/fleet.yaml:8:", ALIAS_LIMIT)),
    "alias bomb in group_vars": Case(
        lambda d: with_group_vars(d, lambda d: write(d, "group_vars/all.yaml", BOMB + "\n")),
        ("{tmp}/group_vars/all.yaml:6:", ALIAS_LIMIT)),
    "alias bomb in host_vars": Case(
        lambda d: with_group_vars(d, lambda d: write(d, "host_vars/lab1.yml", BOMB + "\n")),
        ("{tmp}/host_vars/lab1.yml:6:", ALIAS_LIMIT)),
    "alias bomb in -e @file": Case(
        lambda d: ["vars", str(write(d, "host.yaml", HOST_FILE)), "-e", "@" + str(write(d, "extra.yaml", BOMB))],
        ("{tmp}/extra.yaml:6:", ALIAS_LIMIT)),
    "alias bomb in -e {...}": Case(
        lambda d: ["vars", str(write(d, "host.yaml", HOST_FILE)), "-e", "{" + BOMB.replace("\n", ", ") + "}"],
        ("-e: cannot read", ALIAS_LIMIT)),
    "alias bomb in a playbook": Case(
        lambda d: ["up", "--list-tasks", "--playbook", str(write(
            d, "site.yaml", "- hosts: all\n  vars:\n    " + indented(BOMB, 4) + "\n  tasks: []\n")),
            str(write(d, "host.yaml", HOST_FILE))],
        ("{tmp}/site.yaml:8:", ALIAS_LIMIT)),
    "alias bomb in a role's defaults": Case(
        roles_with_bombed_defaults, ("{tmp}/roles/docker/defaults.yaml:6:", ALIAS_LIMIT)),
    "alias inside its own anchor in -e": Case(
        lambda d: ["vars", str(write(d, "host.yaml", HOST_FILE)), "-e", '{"a": &loop [*loop]}'],
        ("-e: cannot read", "a structure that contains itself")),
    "children that contain themselves": Case(
        lambda d: ["inventory", "--list", "-i", str(write(
            d, "fleet.yaml", "all:\n  children: &groups\n    gpu:\n      children: *groups\n"))],
        ("{tmp}/fleet.yaml:2:", "a structure that contains itself")),
    # nesting depth
    "deep JSON in -e": Case(
        lambda d: ["vars", str(write(d, "host.yaml", HOST_FILE)), "-e", '{"a": ' + "[" * 50_000 + "]" * 50_000 + "}"],
        ("-e: cannot read", DEPTH_LIMIT)),
    "deep flow YAML in an inventory": Case(
        lambda d: ["inventory", "--list", "-i", str(write(
            d, "fleet.yaml", "all:\n  vars:\n    a: " + "[" * 100_000 + "]" * 100_000 + "\n"))],
        ("{tmp}/fleet.yaml:3:", DEPTH_LIMIT)),
    "deep JSON inventory": Case(
        lambda d: ["inventory", "--list", "-i", str(write(
            d, "fleet.json", '{"all": {"vars": {"a": ' + "[" * 100_000 + "]" * 100_000 + "}}}"))],
        ("{tmp}/fleet.json:1:", DEPTH_LIMIT)),
    "deep block YAML in group_vars": Case(
        lambda d: with_group_vars(d, lambda d: write(
            d, "group_vars/all.yaml", "".join("  " * n + f"k{n}:\n" for n in range(300)))),
        ("{tmp}/group_vars/all.yaml:101:", DEPTH_LIMIT)),
    "deep playbook": Case(
        lambda d: ["up", "--list-tasks", "--playbook", str(write(
            d, "site.yaml", "- hosts: all\n  vars:\n    a: " + "[" * 100_000 + "]" * 100_000 + "\n  tasks: []\n")),
            str(write(d, "host.yaml", HOST_FILE))],
        ("{tmp}/site.yaml:3:", DEPTH_LIMIT)),
    "3000 nested INI groups": Case(
        deep_group_chain,
        ("{tmp}/hosts.ini:101: g50: group 'g50' is nested 51 levels under all: more than 50, the limit",)),
    "deep bundle manifest": Case(bundle_with_deep_manifest, ("{tmp}/bundle/manifest.json", "nested too deep")),
    # host ranges
    "range of 10^8 hosts in INI": Case(
        lambda d: ["inventory", "--list", "-i", str(write(d, "hosts.ini", "web[0:99999999].example.com\n"))],
        ("{tmp}/hosts.ini:1:", HOSTS_LIMIT)),
    "range of 10^8 hosts in YAML": Case(
        lambda d: ["inventory", "--list", "-i", str(write(
            d, "fleet.yaml", "all:\n  hosts:\n    web[0:99999999].example.com:\n"))],
        ("{tmp}/fleet.yaml:3:", HOSTS_LIMIT)),
    "letter ranges nested five times": Case(
        lambda d: ["inventory", "--list", "-i", str(write(d, "hosts.ini", "h[a:z][a:z][a:z][a:z][a:z]\n"))],
        ("{tmp}/hosts.ini:1: h[a:z][a:z][a:z][a:z][a:z]:", HOSTS_LIMIT)),
    # file sizes and kinds
    "3 GB inventory": Case(lambda d: ["inventory", "--list", "-i", str(sparse(d, "fleet.yaml"))],
                           ("{tmp}/fleet.yaml:", SIZE_LIMIT)),
    "3 GB group_vars file": Case(lambda d: with_group_vars(d, lambda d: sparse(d, "group_vars/all.yaml")),
                                 ("{tmp}/group_vars/all.yaml:", SIZE_LIMIT)),
    "3 GB -e @file": Case(
        lambda d: ["vars", str(write(d, "host.yaml", HOST_FILE)), "-e", "@" + str(sparse(d, "extra.yaml"))],
        ("{tmp}/extra.yaml:", SIZE_LIMIT)),
    "/dev/zero as inventory": Case(lambda d: ["inventory", "--list", "-i", "/dev/zero"],
                                   ("/dev/zero: not a regular file (a character device)",)),
    "FIFO as inventory": Case(lambda d: ["inventory", "--list", "-i", str(fifo(d, "fleet"))],
                              ("{tmp}/fleet: not a regular file (a FIFO)",)),
    "FIFO as host.yaml": Case(lambda d: ["vars", str(fifo(d, "host.yaml"))],
                              ("{tmp}/host.yaml: not a regular file (a FIFO)",)),
    "FIFO in group_vars": Case(lambda d: with_group_vars(d, lambda d: fifo(d, "group_vars/all.yaml")),
                               ("{tmp}/group_vars/all.yaml: not a regular file (a FIFO)",)),
    "FIFO as -e @file": Case(
        lambda d: ["vars", str(write(d, "host.yaml", HOST_FILE)), "-e", "@" + str(fifo(d, "extra.yaml"))],
        ("{tmp}/extra.yaml: not a regular file (a FIFO)",)),
    "FIFO as --limit @file": Case(
        lambda d: ["inventory", "--list", "-i", ini(d), "--limit", "@" + str(fifo(d, "retry"))],
        ("{tmp}/retry: --limit: cannot read the limit file: not a regular file (a FIFO)",)),
    "FIFO as playbook": Case(
        lambda d: ["up", "--list-tasks", "--playbook", str(fifo(d, "site.yaml")),
                   str(write(d, "host.yaml", HOST_FILE))],
        ("{tmp}/site.yaml: not a regular file (a FIFO)",)),
    "binary --limit @file": Case(
        lambda d: ["inventory", "--list", "-i", ini(d), "--limit", "@" + str(write(d, "retry", b"lab1\n\xff\xfe"))],
        ("{tmp}/retry:2: --limit: cannot read the limit file: not UTF-8 text: byte 0xff at column 1",)),
    "an int of 5000 digits": Case(
        lambda d: with_group_vars(d, lambda d: write(d, "group_vars/all.yaml", "ok: 1\nbig: " + "9" * 5000 + "\n")),
        ("{tmp}/group_vars/all.yaml:2: big: cannot read this value: Exceeds the limit (4300 digits)",)),
    "infinite group priority": Case(
        lambda d: ["inventory", "--list", "-i", str(write(
            d, "hosts.ini", "[gpu]\nlab1\n[gpu:vars]\nansible_group_priority=1e999\n"))],
        ("{tmp}/hosts.ini:4: ansible_group_priority: expected an integer",)),
    # links in group_vars/host_vars and inventory folders
    "dangling link in group_vars": Case(
        lambda d: with_group_vars(d, lambda d: link(d, "group_vars/all.yaml", d / "gone.yaml")),
        ("{tmp}/group_vars/all.yaml: a symbolic link to {tmp}/gone.yaml, which does not exist",)),
    "dangling link in a group_vars folder": Case(
        lambda d: with_group_vars(d, lambda d: group_vars_folder_with(d, "secrets.yaml", d / "gone.yaml")),
        ("{tmp}/group_vars/all/secrets.yaml: a symbolic link to {tmp}/gone.yaml, which does not exist",)),
    "link loop in group_vars": Case(
        lambda d: with_group_vars(d, lambda d: link(d, "group_vars/all.yaml", "all.yaml")),
        ("{tmp}/group_vars/all.yaml: a loop of symbolic links",)),
    "group_vars folder linked inside itself": Case(
        lambda d: with_group_vars(d, lambda d: group_vars_folder_with(d, "again", d / "group_vars/all")),
        ("{tmp}/group_vars/all/again: a link to {tmp}/group_vars/all, a folder it is already inside: a loop",)),
    "dangling link in host_vars": Case(
        lambda d: with_group_vars(d, lambda d: link(d, "host_vars/lab1", d / "gone")),
        ("{tmp}/host_vars/lab1: a symbolic link to {tmp}/gone, which does not exist",)),
    "inventory folder linked inside itself": Case(
        inventory_folder_linked_inside_itself,
        ("{tmp}/inventory/again: a link to {tmp}/inventory, a folder it is already inside: a loop",)),
    # host names
    "newline in a YAML host name": Case(
        lambda d: ["inventory", "--list", "-i", str(write(d, "fleet.yaml", 'all:\n  hosts:\n    "lab1\\nlab2":\n'))],
        ("{tmp}/fleet.yaml:3: host name 'lab1\\nlab2' holds U+000A",)),
    "bidi override in a YAML host name": Case(
        lambda d: ["inventory", "--list", "-i", str(write(
            d, "fleet.yaml", 'all:\n  hosts:\n    "lab\\u202e1bal":\n'))],
        ("{tmp}/fleet.yaml:3: host name 'lab\\u202e1bal' holds U+202E",)),
    "bidi override in an INI host name": Case(
        lambda d: ["inventory", "--list", "-i", str(write(d, "hosts.ini", "[gpu]\nlab\u202e1bal\n"))],
        ("{tmp}/hosts.ini:2: host name 'lab\\u202e1bal' holds U+202E",)),
    "newline in host.yaml's name": Case(
        lambda d: ["vars", str(write(d, "host.yaml", 'name: "lap\\ntop"\naddress: 127.0.0.1\n'))],
        ("{tmp}/host.yaml:1: host name 'lap\\ntop' holds U+000A",)),
    "zero-width space in a group name": Case(
        lambda d: ["inventory", "--list", "-i", str(write(d, "hosts.ini", "[gpu\u200b]\nlab1\n"))],
        ("{tmp}/hosts.ini:1: gpu\u200b: 'gpu\\u200b' is not a group name",)),
    # text rich would read as markup, and odd patterns
    "[/] as --limit": Case(lambda d: ["inventory", "--list", "-i", ini(d), "--limit", "[/]"],
                           ("--limit: no host or group matches '[/]'",)),
    "[/] as -e": Case(lambda d: ["vars", str(write(d, "host.yaml", HOST_FILE)), "-e", "[/]"],
                      ("-e: expected key=value, @file.yaml or a {...} mapping, got '[/]'",)),
    "[/] as --graph": Case(lambda d: ["inventory", "--graph", "[/]", "-i", ini(d)], ("--graph: no group '[/]'",)),
    "a lone ! as --limit": Case(lambda d: ["inventory", "--list", "-i", ini(d), "--limit", "!"],
                                ("--limit: a lone ! or & names nothing",)),
    "a lone & in --limit": Case(lambda d: ["inventory", "--list", "-i", ini(d), "--limit", "lab1:&"],
                                ("--limit: a lone ! or & names nothing",)),
    "a backtracking --limit regex": Case(
        lambda d: ["inventory", "--list", "-i", str(write(d, "hosts.ini", "a" * 40 + "\n")), "--limit", "~(a|a)*b"],
        ("--limit: the pattern '~(a|a)*b' took more than 2 s to match the inventory's names (the limit",)),
    # numbers and paths on the command line
    "--forks 0": Case(lambda d: ["up", "--check", "--forks", "0", str(write(d, "host.yaml", NOBODY_LISTENS))],
                      ("argument --forks: expected at least 1, got 0",)),
    "--connect-timeout nan": Case(
        lambda d: ["up", "--check", "--connect-timeout", "nan", str(write(d, "host.yaml", NOBODY_LISTENS))],
        ("argument --connect-timeout: expected a finite number of at least 0, got 'nan'",)),
    "--json-file a folder": Case(
        lambda d: ["up", "--check", "--json-file", str(d), str(write(d, "host.yaml", NOBODY_LISTENS))],
        ("argument --json-file: '{tmp}' is a folder: give the path of a file",)),
}


def run_cli(folder: Path, argv: list[str] | list[bytes]) -> tuple[subprocess.CompletedProcess[str], float]:
    """`provision ARGV` in `folder`, its memory capped at MEMORY_BOUND and its time at TIME_BOUND."""
    def cap_memory() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_BOUND, MEMORY_BOUND))

    started = time.monotonic()
    try:
        done = subprocess.run([sys.executable, "-m", "provision", *argv], capture_output=True, text=True,
                              errors="replace", cwd=folder, timeout=TIME_BOUND, preexec_fn=cap_memory,
                              stdin=subprocess.DEVNULL, check=False)
    except subprocess.TimeoutExpired:
        pytest.fail(f"provision {argv!r} still ran after {TIME_BOUND} s")
    return done, time.monotonic() - started


@pytest.mark.parametrize("name", CASES)
def test_hostile_input_exits_2_naming_the_file_line_and_limit(name, tmp_path):
    case = CASES[name]
    done, _ = run_cli(tmp_path, case.argv(tmp_path))
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    assert done.returncode == 2, done.stderr[-3000:]
    for expected in case.expected:
        assert expected.replace("{tmp}", str(tmp_path)) in done.stderr


def test_an_argument_that_is_not_utf8_exits_2(tmp_path):
    done, _ = run_cli(tmp_path, [b"vars", str(write(tmp_path, "host.yaml", HOST_FILE)).encode(), b"-e", b"x=\xff"])
    assert "Traceback" not in done.stderr
    assert done.returncode == 2
    assert "an argument is not UTF-8 text: 'x=\\udcff'" in done.stderr


@pytest.mark.parametrize("command", [["vars"], ["up", "--list-hosts"]])
def test_markup_in_a_host_name_is_printed_as_written(command, tmp_path):
    """A host named `lab[/]` is a valid name (host.yaml's `name:` has no ranges): printed, not parsed."""
    host = write(tmp_path, "host.yaml", 'name: "lab[/]"\naddress: 127.0.0.1\nconnection: local\n')
    done, _ = run_cli(tmp_path, [*command, str(host)])
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    assert done.returncode == 0, done.stderr[-3000:]
    assert "lab[/]" in done.stdout


def test_10000_hosts_from_one_pattern_are_still_read(tmp_path):
    """The bound is a bound, not a ban: a fleet of 10 000 written as one range still works."""
    done, _ = run_cli(tmp_path, ["inventory", "--graph", "-i", str(write(tmp_path, "hosts.ini", "web[0000:9999]\n"))])
    assert done.returncode == 0, done.stderr[-3000:]
    assert "web0000" in done.stdout and "web9999" in done.stdout

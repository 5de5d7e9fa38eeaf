"""The judge: ansible-core itself. For every inventory of the corpus in tests/inventories/ (edge
cases written for the INI/YAML/group_vars rules, and real public inventories whose sources their
files name), `ansible-inventory --list` and `provision inventory --list` must agree on the hosts, the
groups, every variable, and the connection settings; and every --limit pattern must select the
same hosts (ansible-core's `InventoryManager.subset`, the code behind `--limit`, run by
tests/ansible_judge.py).

Where provision differs on purpose, the difference is named here (and in the README):
- SECRETS: values of secret-looking names (password, token, api_key, ...) print as `***`.
- BECOME: `become` defaults to true (Ansible: false); Ansible's value is used when set.
- LOCALHOST: a host named `localhost` with no ansible_host/ansible_connection is reached locally
  (Ansible connects to it over SSH unless it is its implicit localhost).
- EMPTY_PATTERN: a pattern matching nothing, or a limit leaving no hosts, is an error (Ansible warns
  and runs on what is left, possibly nothing).
A connection setting neither can render (a vault variable the checkout lacks) is listed as written by
both, and is that host's problem only when it is contacted (UNRENDERED).
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from provision.cli.main import main
from provision.secrets import REDACTOR, is_secret_key

REPO = Path(__file__).resolve().parents[2]
CORPUS = REPO / "tests" / "inventories"
PASSWORD_VARS = {"ansible_become_password", "ansible_become_pass", "ansible_sudo_pass", "ansible_password",
                 "ansible_ssh_pass", "ansible_ssh_password"}
ANSIBLE_ENV = {"ANSIBLE_INVENTORY_UNPARSED_FAILED": "true", "ANSIBLE_NOCOLOR": "1",
               "ANSIBLE_DEPRECATION_WARNINGS": "false"}


@dataclass(frozen=True)
class Case:
    name: str
    inventory: str  # relative to the case folder
    patterns: tuple[str, ...]
    playbook_dir: str | None = None


CASES = [
    Case("ini-ranges", "hosts.ini", ("web", "db[0]", "web[1:3]", "~www-[ab]", "10.0.0.*", "edge:!lb1.example.com",
                                     "node*,db[-1]")),
    Case("ini-vars-children", "inventory", ("usa", "southeast:&raleigh", "usa:!atlanta", "host[1:2]")),
    Case("ini-quoting", "hosts.ini", ("app[1:]", "app2,app4")),
    Case("ini-priority", "hosts.ini", ("a_first:z_last", "z_last:&m_middle")),
    Case("ini-group-vars", "hosts", ("prod", "prod:!db", "cache,web2", "~(web|db)1")),
    Case("ini-connection", "hosts.ini", ("lan", "gpu,control", "lan:&gpu")),
    Case("ini-ungrouped", "inventory", ("ungrouped", "all:!ungrouped", "web:&db", "*.example.com")),
    Case("kubespray-sample", "inventory.ini", ("k8s-cluster", "etcd:&kube-node", "kube_control_plane[0]",
                                              "all:!bastion", "kube-node:!etcd")),
    Case("ansible-docs-ini", "hosts.ini", ("webservers:&prod", "usa", "southeast:!raleigh", "www[01:05]*",
                                           "webservers[0:2]", "db-?.example.com,mail.example.com")),
    Case("ansible-examples-hosts", "hosts", ("webservers", "dbservers[-1]", "~^www00[1-3]", "all:!webservers")),
    Case("kubeadm-terraform", "inventory.ini", ("kube_nodes", "kube_control_plane,worker-1")),
    Case("ini-named-yml", "hosts.yml", ("web[1]",)),
    Case("yaml-ranges", "hosts.yaml", ("web", "edge", "www00[1-3].example.com,node-b")),
    Case("yaml-precedence", "hosts.yml", ("z_parent", "b_sibling:&c_sibling", "all:!a_child")),
    Case("yaml-group-vars", "inventory", ("gpu", "cpu1,gpu2"), playbook_dir="playbooks"),
    Case("ansible-examples-hosts-yaml", "hosts.yaml", ("testing", "webservers:!testing", "ungrouped")),
    Case("kunish-automate", "main.yml", ("homelab", "remote,gateway")),
    Case("yaml-connection", "hosts.yaml", ("laptops", "local", "desk-[12]")),
    Case("yaml-shapes", "inv.yaml", ("db", "replicas,web")),
    Case("dir-mixed", "inventory", ("web", "db:!d1")),
    Case("yaml-no-ext", "hosts", ("cluster[1]",)),
    Case("office", "office.yaml", ("engineering:!eng_vision", "reception,eng-3", "eng*")),
    Case("auberge-lookups", "inventory.yml", ("vps", "selfhosted:&vps", "vibecoder,selfhost")),
]


def ansible_inventory(case: Case, cwd: Path) -> dict[str, Any]:
    command = [str(Path(sys.executable).with_name("ansible-inventory")), "-i", str(CORPUS / case.name / case.inventory),
               "--list"]
    if case.playbook_dir:
        command += ["--playbook-dir", str(CORPUS / case.name / case.playbook_dir)]
    done = subprocess.run(command, capture_output=True, text=True, cwd=cwd, check=False,
                          env={**os.environ, **ANSIBLE_ENV})
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def ansible_judge(case: Case, cwd: Path) -> dict[str, Any]:
    command = [sys.executable, "-m", "tests.ansible_judge", "--inventory", str(CORPUS / case.name / case.inventory)]
    if case.playbook_dir:
        command += ["--playbook-dir", str(CORPUS / case.name / case.playbook_dir)]
    for pattern in case.patterns:
        command += ["--pattern", pattern]
    done = subprocess.run(command, capture_output=True, text=True, cwd=cwd, check=False,
                          env={**os.environ, **ANSIBLE_ENV, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def provision(case: Case, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`provision inventory CASE ARGS` run from `cwd`, in this process: a process for each of the ~90
    runs was half this file's time (0.4 s of start-up each on the 2-core CI machine)."""
    command = ["inventory", str(CORPUS / case.name / case.inventory), *args]
    if case.playbook_dir:
        command += ["--playbook", str(CORPUS / case.name / case.playbook_dir / "site.yaml")]
    out, err, before = io.StringIO(), io.StringIO(), Path.cwd()
    # the redactor lives as long as its process, as a real run's does: values earlier tests of this
    # process registered as secrets (an address under !secret) would be masked here
    registered, REDACTOR._values = REDACTOR._values, set()
    REDACTOR._pattern = None
    os.chdir(cwd)
    try:
        with redirect_stdout(out), redirect_stderr(err):
            try:
                code = main(command)
            except SystemExit as exit:  # argparse's errors
                code = exit.code
    finally:
        os.chdir(before)
        REDACTOR._values, REDACTOR._pattern = registered, None
    return subprocess.CompletedProcess(command, code, out.getvalue(), err.getvalue())


def listed_hosts(document: dict[str, Any]) -> set[str]:
    """Every host an --list document names (hostvars leaves out hosts without variables)."""
    named = set(document["_meta"]["hostvars"])
    for name, group in document.items():
        if name != "_meta":
            named |= set(group.get("hosts", []))
    return named


def masked(key: str, value: Any) -> Any:
    """SECRETS: Ansible's value as provision prints it."""
    if isinstance(value, str) and (is_secret_key(key) or key in PASSWORD_VARS):
        return "***"
    if isinstance(value, dict):
        return {k: masked(k, v) for k, v in value.items()}
    if isinstance(value, list):
        return [masked(key, v) for v in value]
    return value


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An empty working directory: no ansible.cfg, and the folder relative key paths start from."""
    return tmp_path_factory.mktemp("judge")


def test_the_corpus_is_large_enough() -> None:
    ini = [case for case in CASES if _format(case) == "ini"]
    with_vars_folders = [case for case in CASES if any((CORPUS / case.name).rglob("group_vars"))]
    assert len(CASES) >= 20 and len(ini) >= len(CASES) / 2 and len(with_vars_folders) >= 4
    assert sum(len(case.patterns) for case in CASES) >= 30
    assert sorted(case.name for case in CASES) == sorted(p.name for p in CORPUS.iterdir() if p.is_dir())


def _format(case: Case) -> str:
    path = CORPUS / case.name / case.inventory
    text = "".join(p.read_text() for p in ([path] if path.is_file() else sorted(path.rglob("*.ini"))))
    return "ini" if ("[" in text and text.lstrip().startswith(("[", "#", ";"))) or path.suffix == ".ini" else "yaml"


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_hosts_groups_and_every_variable_agree_with_ansible(case: Case, workdir: Path) -> None:
    expected = ansible_inventory(case, workdir)
    ours = provision(case, workdir, "--list")
    assert ours.returncode == 0, ours.stderr
    got = json.loads(ours.stdout)
    assert {k: v for k, v in got.items() if k != "_meta"} == {k: v for k, v in expected.items() if k != "_meta"}
    expected_vars = {host: {k: masked(k, v) for k, v in values.items()}
                     for host, values in expected["_meta"]["hostvars"].items()}
    assert got["_meta"]["hostvars"] == expected_vars


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_limit_patterns_and_connection_settings_agree_with_ansible(case: Case, workdir: Path) -> None:
    judged = ansible_judge(case, workdir)
    for pattern, hosts in judged["patterns"].items():
        ours = provision(case, workdir, "--list", "--limit", pattern)
        if not hosts:  # EMPTY_PATTERN
            assert ours.returncode == 2 and "no host" in ours.stderr, (pattern, ours.stdout)
            continue
        assert ours.returncode == 0, (pattern, ours.stderr)
        assert listed_hosts(json.loads(ours.stdout)) == set(hosts), pattern
    from provision.inventory import load_inventory

    cwd = Path.cwd()
    os.chdir(workdir)
    try:
        playbook_dir = CORPUS / case.name / case.playbook_dir if case.playbook_dir else None
        inventory = load_inventory(CORPUS / case.name / case.inventory, playbook_dir=playbook_dir)
    finally:
        os.chdir(cwd)
    for host in inventory.hosts:
        settings = dict(judged["connection"][host.name])
        # UNRENDERED: what ansible cannot render either (a vault variable this checkout lacks) is the
        # host's problem, raised only if it is contacted; listing it needs nothing rendered
        unrendered = settings.pop("unrendered", {})
        for key in unrendered.values():
            assert any(error.key == key for error in inventory.problems.get(host.name, [])), (host.name, key)
        if not any(key in inventory.hostvars[host.name] for key in ("ansible_become",)):
            settings["become"] = True  # BECOME
        if host.name == "localhost" and not {"ansible_host", "ansible_connection"} & set(inventory.hostvars[host.name]):
            settings.update(connection="local", address="localhost")  # LOCALHOST
        if settings["connection"] == "local":
            settings["address"] = host.address  # where a local host "is" means nothing
        got = {"address": host.address, "port": host.port, "user": host.user,
               "key": str(host.key) if host.key else None, "become": host.become,
               "become_user": host.become_user, "connection": host.connection}
        assert {k: v for k, v in got.items() if k not in unrendered} == settings, host.name


def test_ansible_inventory_is_the_real_one() -> None:
    """The judge is ansible-core from the test extra, not something on PATH by chance."""
    tool = Path(sys.executable).with_name("ansible-inventory")
    assert tool.exists() or shutil.which("ansible-inventory"), "pip install -e '.[test]' installs ansible-core"

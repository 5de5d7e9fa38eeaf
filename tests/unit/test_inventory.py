"""Loading inventories: both forms, validation errors at file:line:key, precedence, secrets."""

from __future__ import annotations

from pathlib import Path

import pytest

from provision.errors import InputError
from provision.inventory import load_inventory, parse_extra_vars
from provision.inventory.model import Origin
from provision.secrets import Secret
from provision.settings.variables import merge_vars

REPO = Path(__file__).resolve().parents[2]


def write(tmp_path: Path, text: str, name: str = "inv.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def load_error(path: Path) -> InputError:
    with pytest.raises(InputError) as caught:
        load_inventory(path)
    return caught.value


def assert_names(error: InputError, path: Path, line: int | None, key: str) -> None:
    assert (error.file, error.line, error.key) == (path, line, key)
    where = f"{path}:{line}: " if line is not None else f"{path}: "
    assert str(error).startswith(f"{where}{key}: ")


# --- the single-host form -------------------------------------------------------------------------

def test_single_host_form(tmp_path: Path) -> None:
    (tmp_path / "keys").mkdir()
    path = write(tmp_path, "address: 192.168.1.50\nport: 2222\nuser: ubuntu\nkey: keys/id\n"
                           "become: false\nknown_hosts: ~/kh\nvars:\n  max_model_len: 65536\n")
    inventory = load_inventory(path)
    [host] = inventory.hosts
    assert host.name == "192.168.1.50"  # name defaults to the address
    assert (host.address, host.port, host.user, host.become, host.connection) == (
        "192.168.1.50", 2222, "ubuntu", False, "ssh")
    assert host.key == tmp_path / "keys" / "id"  # relative to the inventory file's folder
    assert host.known_hosts == Path.home() / "kh"
    assert host.vars == {"max_model_len": 65536}
    assert host.groups == []
    assert inventory.line_of(host.name, "max_model_len") == (path, 8)
    assert inventory.line_of(host.name, "port") == (path, 2)


def test_single_host_defaults(tmp_path: Path) -> None:
    [host] = load_inventory(write(tmp_path, "name: laptop\naddress: lab.example\n")).hosts
    assert (host.name, host.port, host.user, host.key, host.become, host.connection) == (
        "laptop", 22, None, None, True, "ssh")


def test_localhost_without_address_is_local(tmp_path: Path) -> None:
    [host] = load_inventory(write(tmp_path, "name: localhost\n")).hosts
    assert host.is_local and host.address == "localhost"
    [host] = load_inventory(write(tmp_path, "connection: local\n")).hosts
    assert host.is_local and host.name == "localhost"


def test_unknown_top_level_key_suggests_the_right_one(tmp_path: Path) -> None:
    path = write(tmp_path, "address: 10.0.0.1\nuser: ubuntu\nbecme: true\n")
    error = load_error(path)
    assert_names(error, path, 3, "becme")
    assert "did you mean 'become'?" in str(error)


def test_ansible_spelling_at_top_of_host_file_suggests_ours(tmp_path: Path) -> None:
    path = write(tmp_path, "ansible_host: 10.0.0.1\n")
    error = load_error(path)
    assert_names(error, path, 1, "ansible_host")
    assert "did you mean 'address'?" in str(error)


@pytest.mark.parametrize(("line_text", "expected"), [
    ("port: abc", "expected an integer from 1 to 65535, got 'abc'"),
    ("port: 70000", "expected an integer from 1 to 65535, got 70000"),
    ("port: true", "expected an integer from 1 to 65535, got True"),
    ("become: maybe", "expected true or false, got 'maybe'"),
    ("connection: docker", "expected 'ssh' or 'local', got 'docker'"),
    ("user: [a, b]", "expected a user name (a string)"),
    ("address: !secret 10.0.0.9", "got a !secret/!env value"),
    ("address: ubuntu@10.0.0.9", "put the user in user:"),
    ("address: ''", "expected a host name or IP address (a string)"),
])
def test_wrong_types_name_file_line_key_and_expectation(tmp_path: Path, line_text: str, expected: str) -> None:
    address = "" if line_text.startswith("address") else "address: 10.0.0.1\n"
    path = write(tmp_path, f"name: lab\n{line_text}\n{address}")
    error = load_error(path)
    assert_names(error, path, 2, line_text.split(":")[0])
    assert expected in str(error)


def test_vars_must_be_a_mapping(tmp_path: Path) -> None:
    path = write(tmp_path, "address: 10.0.0.1\nvars:\n  - max_model_len\n")
    error = load_error(path)
    assert_names(error, path, 2, "vars")
    assert "expected a mapping" in str(error)


def test_missing_address_names_file_and_key(tmp_path: Path) -> None:
    path = write(tmp_path, "name: laptop\nuser: ubuntu\n")
    error = load_error(path)
    assert_names(error, path, None, "address")


@pytest.mark.parametrize(("text", "fragment"), [
    ("", "the file is empty"),
    ("# only a comment\n", "the file is empty"),
    ("- address: 10.0.0.1\n", "expected a mapping at the top, got list"),
    ("just a string\n", "expected key=value after the host name, got 'a'"),  # read as INI, like Ansible
])
def test_empty_or_non_mapping_file(tmp_path: Path, text: str, fragment: str) -> None:
    path = write(tmp_path, text)
    error = load_error(path)
    assert error.file == path and fragment in str(error)


def test_password_logins_are_refused_before_contact(tmp_path: Path) -> None:
    path = write(tmp_path, "all:\n  hosts:\n    lab1:\n      ansible_password: hunter2\n    lab2:\n")
    inventory = load_inventory(path)  # listing the inventory works; contacting lab1 does not
    assert str(inventory.hostvars["lab1"]["ansible_password"]) == "***"
    inventory.check_connectable(inventory.select("lab2"))
    with pytest.raises(InputError) as caught:
        inventory.check_connectable(inventory.select("lab1"))
    assert_names(caught.value, path, 4, "ansible_password")
    assert "hunter2" not in str(caught.value) and "password logins are not supported" in str(caught.value)


def test_key_file_is_checked_for_selected_hosts_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "id_present").write_text("key")
    path = write(tmp_path, f"all:\n  hosts:\n    lab1:\n      ansible_private_key_file: {tmp_path}/id_present\n"
                           "    lab2:\n      ansible_ssh_private_key_file: id_missing\n")
    monkeypatch.chdir(tmp_path)  # a relative key path is taken from the working directory, as by ssh
    inventory = load_inventory(path)  # loading never needs the key files
    inventory.check_key_files(inventory.select("lab1"))
    with pytest.raises(InputError) as caught:
        inventory.check_key_files(inventory.select("lab2"))
    assert_names(caught.value, path, 6, "ansible_ssh_private_key_file")
    assert str(tmp_path / "id_missing") in str(caught.value)


# --- secrets ---------------------------------------------------------------------------------------

def test_secret_looking_variables_never_print(tmp_path: Path) -> None:
    path = write(tmp_path, "address: 10.0.0.1\nvars:\n  hf_token: hf_plainvalue123\n"
                           "  vllm:\n    api_key: sk-nestedvalue456\n  model: gemma\n")
    [host] = load_inventory(path).hosts
    assert isinstance(host.vars["hf_token"], Secret)
    assert host.vars["hf_token"].reveal() == "hf_plainvalue123"
    assert host.vars["vllm"]["api_key"].reveal() == "sk-nestedvalue456"
    assert host.vars["model"] == "gemma"
    printed = f"{host} {host!r} {host.vars} {host.vars['hf_token']} {host.vars['hf_token']!r}"
    assert "hf_plainvalue123" not in printed and "sk-nestedvalue456" not in printed
    assert "***" in printed


# --- the fleet form --------------------------------------------------------------------------------

PRECEDENCE = """\
all:
  vars:
    level: all
    ansible_user: fleetuser
  children:
    z_parent:
      vars:
        level: parent
        only_parent: 1
        ansible_port: 2200
      children:
        a_child:
          vars:
            level: child
          hosts:
            lab1:
            lab2:
              level: host
              ansible_port: 2202
"""


def test_precedence_all_then_parent_then_child_then_host_then_extra(tmp_path: Path) -> None:
    # a_child sorts before z_parent by name: only depth puts the child's vars above the parent's
    inventory = load_inventory(write(tmp_path, PRECEDENCE))
    lab1, lab2 = inventory.hosts
    assert lab1.vars == {"level": "child", "only_parent": 1}
    assert lab2.vars["level"] == "host"
    assert lab1.groups == ["z_parent", "a_child"]
    assert merge_vars({"level": "role default"}, lab2.vars, parse_extra_vars(["level=extra"]))["level"] \
        == "extra"
    assert inventory.line_of("lab1", "level") == (tmp_path / "inv.yaml", 14)
    assert inventory.line_of("lab2", "level") == (tmp_path / "inv.yaml", 18)


def test_connection_settings_are_inherited_and_not_variables(tmp_path: Path) -> None:
    lab1, lab2 = load_inventory(write(tmp_path, PRECEDENCE)).hosts
    assert (lab1.user, lab1.port, lab1.address) == ("fleetuser", 2200, "lab1")  # address: its name
    assert (lab2.user, lab2.port) == ("fleetuser", 2202)
    assert not any(key.startswith("ansible_") for key in {**lab1.vars, **lab2.vars})


def test_ansible_variable_names(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "id").write_text("key")
    monkeypatch.chdir(tmp_path)
    path = write(tmp_path, "all:\n  hosts:\n    lab1:\n      ansible_host: 127.0.0.1\n"
                           "      ansible_port: 2201\n      ansible_user: root\n"
                           "      ansible_ssh_private_key_file: id\n      ansible_become: false\n"
                           "      ansible_connection: ssh\n      ansible_python_interpreter: /usr/bin/python3\n")
    inventory = load_inventory(path)
    [host] = inventory.hosts
    assert (host.address, host.port, host.user, host.key, host.become, host.connection) == (
        "127.0.0.1", 2201, "root", tmp_path / "id", False, "ssh")
    assert host.vars == {"ansible_python_interpreter": "/usr/bin/python3"}
    assert inventory.line_of("lab1", "ansible_port") == (path, 5)
    assert inventory.origins["lab1"]["ansible_port"] == Origin(path, 5, "ansible_port")


def test_host_in_several_groups_is_one_host_with_merged_vars(tmp_path: Path) -> None:
    path = write(tmp_path, "all:\n  children:\n    gpu:\n      vars: {a: gpu, b: gpu}\n"
                           "      hosts:\n        lab1: {x: 1}\n    office:\n      vars: {b: office}\n"
                           "      hosts:\n        lab1: {y: 2}\n        lab2:\n")
    inventory = load_inventory(path)
    assert [host.name for host in inventory.hosts] == ["lab1", "lab2"]
    lab1 = inventory.hosts[0]
    assert lab1.groups == ["gpu", "office"]
    assert lab1.vars == {"a": "gpu", "b": "office", "x": 1, "y": 2}


def test_top_level_groups_without_all(tmp_path: Path) -> None:
    inventory = load_inventory(write(tmp_path, "web:\n  hosts:\n    w1:\ndb:\n  hosts:\n    d1:\n"))
    assert [(host.name, host.groups) for host in inventory.hosts] == [("w1", ["web"]), ("d1", ["db"])]


@pytest.mark.parametrize(("text", "line", "key", "suggestion"), [
    ("all:\n  hosts:\n    lab1:\n  chidren:\n    g: {}\n", 4, "chidren", "children"),
    ("all:\n  children:\n    gpu:\n      host:\n        lab1:\n", 4, "host", "hosts"),
    ("all:\n  hosts:\n    lab1:\n  var:\n    a: 1\n", 4, "var", "vars"),
    ("all:\n  hosts:\n    lab1:\nalll: 1\n", 4, "alll", "all"),
])
def test_unknown_structural_key_suggests(tmp_path: Path, text: str, line: int, key: str, suggestion: str) -> None:
    path = write(tmp_path, text)
    error = load_error(path)
    assert_names(error, path, line, key)
    assert f"did you mean '{suggestion}'?" in str(error)


@pytest.mark.parametrize(("text", "line", "key", "fragment"), [
    ("all:\n  hosts:\n    - lab1\n", 2, "hosts", "expected a mapping of host names"),
    ("all:\n  vars: [a]\n  hosts:\n    lab1:\n", 2, "vars", "expected a mapping of variable names"),
    ("all:\n  hosts:\n    lab1: 10.0.0.1\n", 3, "lab1", "expected a mapping of host variables"),
    ("all:\n  children:\n    g:\n      vars:\n        ansible_port: 'x22'\n      hosts: {lab1: }\n",
     5, "ansible_port", "expected an integer from 1 to 65535, got 'x22'"),
    ("all:\n  hosts:\n    web[01:1]:\n", 3, "web[01:1]", "equal-length begin and end"),
])
def test_fleet_errors(tmp_path: Path, text: str, line: int, key: str, fragment: str) -> None:
    path = write(tmp_path, text)
    error = load_error(path)
    assert_names(error, path, line, key)
    assert fragment in str(error)


def test_group_cycle_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path, "all:\n  children:\n    a:\n      children:\n        b:\n"
                           "    b:\n      children:\n        a:\n      hosts: {lab1: }\n")
    error = load_error(path)
    assert "cycle" in str(error) and error.file == path


# --- the example files -----------------------------------------------------------------------------

def test_example_files_load_and_key_check_passes_when_the_key_exists(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    host_file, office_file = REPO / "inventory" / "host.yaml", REPO / "inventory" / "office.yaml"
    single, office = load_inventory(host_file), load_inventory(office_file)
    [laptop] = single.hosts
    assert (laptop.address, laptop.user, laptop.become) == ("192.168.1.50", "ubuntu", True)
    assert laptop.key == tmp_path / ".ssh" / "id_ed25519"
    assert len(office.hosts) == 5 and set(office.group_names) == {"reception", "engineering", "eng_vision"}
    assert all(host.user == "ubuntu" and host.key == laptop.key for host in office.hosts)
    with pytest.raises(InputError) as caught:
        single.check_key_files(single.hosts)
    assert caught.value.file == host_file and caught.value.key == "key"
    (tmp_path / ".ssh").mkdir()
    (tmp_path / ".ssh" / "id_ed25519").write_text("key")
    single.check_key_files(single.hosts)
    office.check_key_files(office.hosts)

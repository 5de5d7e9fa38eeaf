"""A run gathers only the facts its tasks read (issue 13): the probe prints only the sections asked
for, the engine finds the fields a task's templates name (through the variables they use) and its
operation declares, and reading any other fact fails loudly instead of seeing an empty default."""

from __future__ import annotations

import re
import subprocess
import textwrap
from pathlib import Path
from typing import Any, ClassVar

import pytest

from provision.errors import FactNotGathered
from provision.facts.model import HostFacts
from provision.facts.probe import parse_probe, probe_for, probe_script
from provision.facts.sections import registry
from provision.inventory.loader import load_inventory
from provision.ops import OPERATION_MODULES
from provision.ops.base import REGISTERED, OpArgs, Operation, Plan
from provision.playbook.loader import load_playbook
from provision.playbook.templating import make_environment
from provision.runner.events import SilentReporter
from provision.runner.host_run import HostState, PlayOnHost, RunOptions
from provision.runner.runner import RunConfig, Runner

REPO = Path(__file__).resolve().parents[2]
FACT_FIELDS = registry().fact_fields
FIELD_SECTIONS = registry().field_sections


def test_every_fact_has_its_sections_and_every_section_is_asked_for_by_name() -> None:
    assert set(FIELD_SECTIONS) == FACT_FIELDS
    in_script = set(re.findall(r"^if want ([a-z-]+); then$", probe_script(), re.M))
    assert in_script == {section for sections in FIELD_SECTIONS.values() for section in sections}


def probe_here(fields: set[str] | None) -> str:
    return subprocess.run(["bash", "-c", probe_for(fields)], capture_output=True, text=True, check=True).stdout


def test_the_probe_prints_only_the_sections_asked_for_and_reading_another_fact_fails() -> None:
    output = probe_here({"os"})
    assert re.findall(r"^@@section (\S+)$", output, re.M) == ["probe", "os-release"]
    facts = parse_probe(output)
    assert facts.os.id  # this machine's
    assert set(facts.as_vars()) == {"os"}
    with pytest.raises(FactNotGathered, match="fact 'docker_version' was read but not gathered"):
        _ = facts.docker_version


def test_no_fields_asked_prints_no_section_and_all_prints_every_one() -> None:
    assert re.findall(r"^@@section (\S+)$", probe_here(set()), re.M) == ["probe"]
    everything = parse_probe(probe_here(None))
    assert everything.gathered is None and set(everything.as_vars()) == FACT_FIELDS


def test_facts_gathered_later_are_merged_in() -> None:
    first = parse_probe(probe_here({"os"}))
    both = first.merged(parse_probe(probe_here({"arch"})))
    assert both.gathered == {"os", "arch", "kernel"} and both.os == first.os and both.arch


def needed(tags: frozenset[str], **variables: Any) -> frozenset[str] | None:
    plays = load_playbook(REPO / "playbooks/site.yaml", REPO / "roles")
    play = next(p for p in plays if p.name == "GPU inference host")
    options = RunOptions(tags=tags)
    on_host = PlayOnHost(play, HostState("h", connect=lambda: None), {**play.role_defaults, **variables},
                         make_environment(play.template_dirs), options, SilentReporter(), None)
    tasks = [t for t in play.tasks if options.selects(t)]
    return on_host.facts_needed([*tasks, *on_host.handlers_notifiable_by(tasks)])


def test_the_docker_role_reads_only_the_engines_packages_and_the_release_unless_it_adds_docker_s_repository() -> None:
    # which engine is installed (Docker CE is adopted, not replaced by docker.io: issue 21), and the
    # release, whose docker.io's package set the role may know (docker_distro_runtime_packages)
    assert needed(frozenset({"docker"}), docker_insecure_registries=[]) == {"os", "docker_packages"}
    # the repository's suite is the OS codename, its URL the OS id (through docker_repo_url), the
    # architecture is the operation's own read (apt_repository.reads_facts)
    assert needed(frozenset({"docker"}), docker_insecure_registries=[], docker_source="docker") == {
        "os", "arch", "docker_packages"}


def test_the_preflight_reads_what_its_checks_name() -> None:
    fields = needed(frozenset({"preflight"}))
    assert fields is not None and {"os", "arch", "pci_gpus", "secure_boot", "dpkg_locked"} <= fields
    assert "docker_version" not in fields and "disks" not in fields


class ReadsKernelArgs(OpArgs):
    path: str


class ReadsKernelUndeclared(Operation):
    """A stand-in operation (tests only) whose plan reads a fact it does not declare."""

    name = "test_reads_kernel"
    Args = ReadsKernelArgs
    reads_facts: ClassVar[frozenset[str]] = frozenset()

    def plan(self, args: ReadsKernelArgs, facts: HostFacts, state: str) -> Plan:
        return Plan.ok(summary=f"kernel {facts.kernel}")


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip("\n"))


def run_here(project: Path) -> dict[str, Any]:
    inventory = load_inventory(project / "inventory.yaml")
    plays = load_playbook(project / "playbooks/site.yaml")
    result = Runner(inventory, RunConfig(lock=False), SilentReporter()).run(plays)
    return result.document()["hosts"]["here"]


def test_a_fact_read_that_was_not_gathered_fails_the_task_loudly(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setitem(OPERATION_MODULES, "test_reads_kernel", __name__)
    monkeypatch.setitem(REGISTERED, "test_reads_kernel", ReadsKernelUndeclared())
    write(tmp_path / "inventory.yaml", "name: here\nconnection: local\n")
    write(tmp_path / "playbooks/site.yaml", "- {name: demo, hosts: all, roles: [r]}\n")
    write(tmp_path / "roles/r/tasks.yaml", """
        - name: named by a template
          debug: {msg: "os {{ facts.os.id }}"}
        - name: read in Python, not declared
          test_reads_kernel: {path: /}
    """)
    host = run_here(tmp_path)
    first, second = host["tasks"]
    assert first["status"] == "ok" and first["summary"].startswith("os ") and first["summary"] != "os "
    assert second["status"] == "failed"
    assert "fact 'kernel' was read but not gathered" in second["error"]

"""Templates and trust (issue 19): what a host, a mirror or a bundle sent is data, returned verbatim
and never rendered; every template of the user's (inventory values, `-e` values, role defaults)
renders in one bounded sandbox, and a hostile one is an input error: exit 2, a message naming the
limit or the refused attribute, no traceback, no hang, and the marker file it tries to create never
appears.

The payloads are the classic Jinja escapes (`cycler.__init__.__globals__`, `lipsum.__globals__`,
`''.__class__.__mro__`; see https://jinja.palletsprojects.com/en/stable/sandbox/) and the runaway
templates the sandbox itself leaves to the application (loops, sizes, recursion).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from provision.bundle.needs import host_needs
from provision.facts import gather
from provision.facts.model import HostFacts, OsInfo
from provision.inventory.loader import load_inventory
from provision.playbook.loader import load_playbook
from provision.runner import host_run
from provision.runner.events import SilentReporter
from provision.runner.host_run import RunOptions
from provision.runner.runner import RunConfig, Runner
from tests.unit.project_support import write

REPO = Path(__file__).resolve().parents[3]
#: what a hostile template may take before the test calls it a hang (the CLI's start included)
TIME_BOUND_S = 10.0


def escapes(marker: Path) -> dict[str, str]:
    """Templates that run `touch MARKER` on the controller when rendered outside the sandbox."""
    touch = f"touch {marker}"
    return {
        "lipsum.__globals__": f"{{{{ lipsum.__globals__['os'].system('{touch}') }}}}",
        "cycler.__init__.__globals__": f"{{{{ cycler.__init__.__globals__.os.system('{touch}') }}}}",
        "joiner.__init__.__globals__": f"{{{{ joiner.__init__.__globals__['os'].popen('{touch}').read() }}}}",
        "''.__class__.__mro__": ("{% for c in ''.__class__.__mro__[1].__subclasses__() %}"
                                 "{% if c.__name__ == 'Popen' %}{{ c(['touch', '" + str(marker) + "']) }}"
                                 "{% endif %}{% endfor %}"),
        "namespace.__init__.__globals__": f"{{{{ namespace.__init__.__globals__.os.system('{touch}') }}}}",
    }


# ------------------------------------------------------------------------------------------ data is data
@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A one-role project on this machine (local connection), as tests/unit/test_runner_local.py."""
    write(tmp_path / "inventory.yaml", f"""
        name: here
        connection: local
        vars:
          target: {tmp_path / "target"}
    """)
    write(tmp_path / "playbooks/site.yaml", """
        - name: demo
          hosts: all
          roles: [r]
    """)
    (tmp_path / "target").mkdir()
    return tmp_path


def run(project: Path, extra_vars: dict[str, object] | None = None) -> dict:
    config = RunConfig(options=RunOptions(handlers_dir=str(project / "handlers")), extra_vars=extra_vars or {},
                       lock=False)
    result = Runner(load_inventory(project / "inventory.yaml"), config, SilentReporter()).run(
        load_playbook(project / "playbooks/site.yaml"))
    return result.document()["hosts"]["here"]


def host_sends(monkeypatch: pytest.MonkeyPatch, section: str, body: str) -> None:
    """The host's facts probe prints `body` in `section`, as a host where a local user chose it would
    (a process name in `nvidia-smi -q -d PIDS`, a PRETTY_NAME in /etc/os-release)."""
    real = gather.facts_from

    def facts_from(stdout: str, host_name: str, *args: object) -> object:
        return real(f"{stdout}\n@@section {section}\n{body}\n", host_name, *args)

    monkeypatch.setattr(host_run, "facts_from", facts_from)


def gpu_process(name: str) -> str:
    """`nvidia-smi -q -d PIDS` with one compute process (the layout of tests/standins/nvidia/payload/nvidia-smi)."""
    return textwrap.dedent(f"""
        GPU 00000000:01:00.0
            FB Memory Usage
                Total                                          : 32607 MiB
                Used                                           : 1200 MiB
            Processes
                GPU instance ID                                : N/A
                Compute instance ID                            : N/A
                Process ID                                     : 4242
                    Type                                       : C
                    Name                                       : {name}
                    Used GPU Memory                            : 1190 MiB
    """).strip()


def _registered_stdout(project: Path, monkeypatch: pytest.MonkeyPatch, hostile: str) -> str:
    (project / "from-host").write_text(hostile)
    write(project / "roles/r/tasks.yaml", f"""
        - name: read what the host has
          command: {{cmd: "cat {project / 'from-host'}"}}
          register: out
          changed_when: false
        - name: write it back
          file: {{dest: "{{{{ target }}}}/copy", content: "{{{{ out.stdout }}}}"}}
    """)
    return "copy"


def _registered_in_a_condition(project: Path, monkeypatch: pytest.MonkeyPatch, hostile: str) -> str:
    """Data stays usable as a string: comparisons, `in`, filters and tests see the text."""
    (project / "from-host").write_text(hostile)
    write(project / "roles/r/tasks.yaml", f"""
        - name: read what the host has
          command: {{cmd: "cat {project / 'from-host'}"}}
          register: out
          changed_when: false
        - name: only when the text is what it is
          file: {{dest: "{{{{ target }}}}/copy", content: "{{{{ out.stdout | trim }}}}"}}
          when:
            - out.stdout is match('[{{][{{]')
            - "'{{{{' in out.stdout"
            - out.stdout | length == {len(hostile)}
            - out.stdout_lines[0] == out.stdout
    """)
    return "copy"


def _fact_gpu_process_name(project: Path, monkeypatch: pytest.MonkeyPatch, hostile: str) -> str:
    host_sends(monkeypatch, "nvidia-smi-pids", gpu_process(hostile))
    write(project / "roles/r/tasks.yaml", """
        - name: the processes on the GPU
          file: {dest: "{{ target }}/copy", content: "{{ facts.gpu_processes | map(attribute='name') | join(',') }}"}
    """)
    return "copy"


def _nested_fact_through_a_variable(project: Path, monkeypatch: pytest.MonkeyPatch, hostile: str) -> str:
    host_sends(monkeypatch, "os-release", f"ID=ubuntu\nVERSION_CODENAME=noble\nPRETTY_NAME={json.dumps(hostile)}")
    write(project / "roles/r/defaults.yaml", """
        os_seen: "{{ facts.os }}"
    """)
    write(project / "roles/r/tasks.yaml", """
        - name: the os as the host names it
          file: {dest: "{{ target }}/copy", content: "{{ os_seen.pretty }}"}
    """)
    return "copy"


DATA_CASES: dict[str, Callable[[Path, pytest.MonkeyPatch, str], str]] = {
    "registered stdout": _registered_stdout,
    "registered stdout in when, match, in, length": _registered_in_a_condition,
    "fact: a GPU process name": _fact_gpu_process_name,
    "nested fact dict through a role default": _nested_fact_through_a_variable,
}


@pytest.mark.parametrize("escape", ["lipsum.__globals__", "cycler.__init__.__globals__"])
@pytest.mark.parametrize("case", list(DATA_CASES))
def test_what_a_host_sends_is_written_verbatim_and_never_rendered(project: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  case: str, escape: str) -> None:
    marker = project / "pwned"
    hostile = escapes(marker)[escape]
    written = DATA_CASES[case](project, monkeypatch, hostile)
    host = run(project)
    assert not marker.exists()
    assert host["failed"] == 0, host
    assert (project / "target" / written).read_text() == hostile


def test_facts_a_bundle_reads_are_data_too(tmp_path: Path) -> None:
    """`up --bundle` and `provision bundle` work out what a host needs from its facts: rendered with
    the site's own tasks, a hostile OS id stays text."""
    marker = tmp_path / "pwned"
    hostile = escapes(marker)["cycler.__init__.__globals__"]
    inventory_file = write(tmp_path / "inventory.yaml", json.dumps({"all": {"hosts": {"desk-1": {}}}}))
    inventory = load_inventory(inventory_file)
    facts = HostFacts(os=OsInfo(id=hostile, version_id="24.04", codename="noble", pretty=hostile),
                      arch="x86_64").as_vars()
    needs = host_needs(load_playbook(REPO / "playbooks/site.yaml"), inventory, inventory.host("desk-1"), facts, {},
                       RunOptions())
    assert not marker.exists()
    assert needs.release == f"{hostile}-noble"
    # the CUDA repository's keyring URL is named by the OS id: the text as the host sent it
    assert any(hostile in str(value) for repository in needs.repositories for value in repository.values())


# ------------------------------------------------------------------------ the user's templates: sandboxed
RUNAWAY = {
    "a loop of 10**9": ("{% for i in range(10**9) %}{% endfor %}x", "MAX_RANGE"),
    "loops of 10**5 x 10**5": ("{% for i in range(10**5) %}{% for j in range(10**5) %}{% endfor %}{% endfor %}x",
                               "MAX_STEPS"),
    "a range of 10**10 as a list": ("{{ range(10**10) | list | length }}", "MAX_RANGE"),
    "a huge output": ("{% for i in range(10**5) %}{{ 'x' * 1000 }}{% endfor %}", "MAX_TEXT"),
    "a string of 10**10": ("{{ 'x' * 10**10 }}", "MAX_TEXT"),
    "a doubling string": ("{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}"
                          "{% endfor %}{{ ns.s | length }}", "MAX_TEXT"),
    "a %-format of 10**12": ("{{ '%999999999999s' % 'x' }}", "MAX_TEXT"),
    "a str.format of 10**12": ("{{ '{:>999999999999}'.format('x') }}", "MAX_TEXT"),
    "center(10**12)": ("{{ 'x' | center(10**12) }}", "MAX_TEXT"),
    "an integer of 10**6 digits": ("{{ 10 ** 1000000 }}", "MAX_INT_BITS"),
    "a macro calling itself": ("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}", "nesting depth"),
    "2**40 macro calls": ("{% macro f(n) %}{% if n %}{{ f(n - 1) }}{{ f(n - 1) }}{% endif %}{% endmacro %}"
                          "{{ f(40) }}", "MAX_STEPS"),
}


def provision(*argv: str) -> tuple[int, str, float]:
    """The CLI as a user runs it, in its own process (a hang is a timeout here, not a stuck test run)."""
    started = time.monotonic()
    try:
        done = subprocess.run([sys.executable, "-m", "provision", *argv], capture_output=True, text=True,
                              timeout=TIME_BOUND_S, env={**os.environ, "COLUMNS": "1000"}, cwd=REPO)
    except subprocess.TimeoutExpired:
        pytest.fail(f"provision {' '.join(argv)[:200]} did not finish in {TIME_BOUND_S} s")
    return done.returncode, done.stdout + done.stderr, time.monotonic() - started


def host_file(tmp_path: Path, **settings: object) -> Path:
    return write(tmp_path / "host.yaml", "name: workhorse\naddress: 192.0.2.50\n"
                 + "".join(f"{key}: {json.dumps(value)}\n" for key, value in settings.items()))


def assert_refused(code: int, output: str, marker: Path, *names: str) -> None:
    assert code == 2, output
    assert "Traceback" not in output, output
    assert not marker.exists()
    for name in names:
        assert name in output, output


@pytest.mark.parametrize("escape", ["lipsum.__globals__", "cycler.__init__.__globals__", "joiner.__init__.__globals__",
                                    "''.__class__.__mro__", "namespace.__init__.__globals__"])
def test_render_refuses_an_escape_in_an_extra_var(tmp_path: Path, escape: str) -> None:
    marker = tmp_path / "pwned"
    code, output, _ = provision("render", str(REPO / "inventory/host.yaml"), "-e",
                                json.dumps({"served_model_name": escapes(marker)[escape]}))
    assert_refused(code, output, marker, "served_model_name", "unsafe")


def test_render_refuses_an_escape_in_an_inventory_var(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    code, output, _ = provision("render", str(host_file(tmp_path, vars={
        "hf_model": escapes(marker)["cycler.__init__.__globals__"]})))
    assert_refused(code, output, marker, "hf_model", "unsafe")


def test_an_escape_in_a_connection_variable_is_refused_before_contact(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    inventory = write(tmp_path / "hosts.yaml", json.dumps({"all": {"hosts": {"desk-1": {
        "ansible_host": escapes(marker)["lipsum.__globals__"]}}}}))
    code, output, _ = provision("up", str(inventory), "--check")
    assert_refused(code, output, marker, "ansible_host", "unsafe")


@pytest.mark.parametrize("case", list(RUNAWAY))
def test_render_stops_a_runaway_extra_var_naming_the_limit(tmp_path: Path, case: str) -> None:
    template, limit = RUNAWAY[case]
    code, output, took = provision("render", str(REPO / "inventory/host.yaml"), "-e",
                                   json.dumps({"served_model_name": template}))
    assert_refused(code, output, tmp_path / "none", "served_model_name", limit)
    assert took < TIME_BOUND_S


@pytest.mark.parametrize("case", ["loops of 10**5 x 10**5", "a huge output"])
def test_render_stops_a_runaway_inventory_var(tmp_path: Path, case: str) -> None:
    template, limit = RUNAWAY[case]
    code, output, _ = provision("render", str(host_file(tmp_path, vars={"hf_model": template})))
    assert_refused(code, output, tmp_path / "none", "hf_model", limit)


def test_a_runaway_connection_variable_is_refused_before_contact(tmp_path: Path) -> None:
    template, limit = RUNAWAY["loops of 10**5 x 10**5"]
    inventory = write(tmp_path / "hosts.yaml", json.dumps({"all": {"hosts": {"desk-1": {"ansible_host": template}}}}))
    code, output, _ = provision("up", str(inventory), "--check")
    assert_refused(code, output, tmp_path / "none", "ansible_host", limit)


@pytest.mark.parametrize("case", ["cycler.__init__.__globals__", "loops of 10**5 x 10**5"])
def test_up_renders_an_extra_var_in_the_sandbox(project: Path, case: str) -> None:
    """`up`: the task that reads the value fails naming it and the limit; nothing else runs."""
    marker = project / "pwned"
    template, limit = RUNAWAY[case] if case in RUNAWAY else (escapes(marker)[case], "unsafe")
    write(project / "roles/r/tasks.yaml", """
        - name: greeting
          file: {dest: "{{ target }}/greeting", content: "{{ greeting }}"}
    """)
    started = time.monotonic()
    host = run(project, extra_vars={"greeting": template})
    assert time.monotonic() - started < TIME_BOUND_S
    assert not marker.exists() and not (project / "target/greeting").exists()
    error = host["tasks"][0]["error"]
    assert host["failed"] == 1 and "greeting" in error and limit in error


# ------------------------------------------------------------- the sandbox itself, on every template kind
SANDBOX_PROBES = {
    "str.ljust(10**10)": ("{{ 'x'.ljust(10**10) }}", "MAX_TEXT"),
    "str.replace('', huge)": ("{{ 'ab'.replace('', 'x' * 4000000) }}", "MAX_TEXT"),
    "join of 1000 x 4 MB": ("{{ (['x' * 4000000] * 1000) | join }}", "MAX_TEXT"),
    "'%*s' % (10**10, x)": ("{{ '%*s' % (10**10, 'x') }}", "MAX_TEXT"),
    "indent(10**10)": ("{{ 'x' | indent(10**10) }}", "MAX_TEXT"),
    "lipsum(n=10**6)": ("{{ lipsum(n=10**6) }}", "MAX_TEXT"),
    "2 ** 100000": ("{{ 2 ** 100000 }}", "MAX_INT_BITS"),
    "an integer squared 40 times": ("{% set ns = namespace(n=2) %}{% for i in range(40) %}{% set ns.n = ns.n * ns.n %}"
                                    "{% endfor %}{{ ns.n }}", "MAX_INT_BITS"),
    "a recursive loop without end": ("{% for x in [1, 2] recursive %}{{ loop([1, 2]) }}{% endfor %}", "nesting depth"),
    "dict.update": ("{{ dict(a=1).update({'b': 2}) }}", "unsafe"),
    "().__class__.__base__": ("{{ ().__class__.__base__.__subclasses__() }}", "unsafe"),
    "self.__init__.__globals__": ("{{ self.__init__.__globals__ }}", "unsafe"),
    "'{0.__class__}'.format": ("{{ '{0.__class__}'.format('x') }}", "unsafe"),
    "lookup('pipe')": ("{{ lookup('pipe', 'id') }}", "lookup 'pipe' is not supported"),
}


@pytest.mark.parametrize("case", list(SANDBOX_PROBES))
def test_the_sandbox_refuses_naming_the_limit(case: str) -> None:
    from provision.playbook.templating import Renderer, TemplateError, make_environment

    template, limit = SANDBOX_PROBES[case]
    started = time.monotonic()
    with pytest.raises(TemplateError, match=limit.replace("(", r"\(")) as refused:
        Renderer(make_environment(), {}).render(template)
    assert time.monotonic() - started < 5
    assert template in str(refused.value)  # the template is named


def test_a_list_sum_is_linear_and_sized() -> None:
    """`lists | sum(start=[])`, Ansible's flatten: 100,000 lists in well under a second, not quadratic."""
    from provision.playbook.templating import Renderer, make_environment

    started = time.monotonic()
    assert Renderer(make_environment(), {}).render("{{ ([[1] * 40] * 100000) | sum(start=[]) | length }}") == 4000000
    assert time.monotonic() - started < 5


@pytest.mark.parametrize("expression", ["1 + 'a'", "1 // 0", "[1][5]", "{}['missing']", "range(3) | first + 'a'"])
def test_a_python_error_in_a_users_template_is_exit_2_never_a_traceback(tmp_path: Path, expression: str) -> None:
    """`{{ 1 + 'a' }}` raised TypeError through render: a traceback for a user's typo."""
    code, output, _ = provision("render", str(REPO / "inventory/host.yaml"), "-e",
                                json.dumps({"served_model_name": "{{ " + expression + " }}"}))
    assert_refused(code, output, tmp_path / "none", "served_model_name", "cannot be rendered")

"""`provision smoke | rollback | render`: the served model's own commands.

`smoke` and `rollback` run one task file of the serving play (roles/smoke/tasks.yaml,
roles/vllm/rollback.yaml) through the ordinary runner, with the play's role defaults, the inventory
and `-e`, so they see exactly the settings `provision up` uses. `render` touches no host: it prints
the `vllm serve` argument vector each host's service gets, one argument a line, to be checked against
vLLM's own parser.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from rich.table import Table
from rich.text import Text

from provision.cli.commands import write_document
from provision.cli.consoles import plain_console
from provision.cli.endpoints import SERVING_ROLE, serving_play
from provision.cli.inputs import EXIT_FAILED, EXIT_OK, Invocation
from provision.cli.output import ConsoleReporter, recap_table
from provision.errors import InputError
from provision.inventory.model import Host
from provision.playbook.loader import load_task_file
from provision.playbook.model import Play, Role, Task
from provision.playbook.templating import Renderer, TemplateError, make_environment
from provision.runner.results import Status
from provision.runner.runner import Runner
from provision.secrets import REDACTOR
from provision.settings.variables import host_variables
from provision.vllm.argv import FlagError, serve_arguments
from provision.vllm.ops.vllm_service import ServiceSpec

RELEASE_OP = "vllm_release"

SMOKE_ROLE = "smoke"


def task_file_play(play: Play, role_name: str, file_name: str) -> Play:
    """A play running only `roles/ROLE/FILE`, with `play`'s hosts, vars and every role's defaults."""
    role = next((r for r in play.roles if r.name == role_name), None)
    if role is None:
        raise InputError(f"the play {play.name!r} has no {role_name!r} role", file=play.source.file)
    tasks = load_task_file(role.path / file_name, role.name)
    if not tasks:
        raise InputError(f"{role.path / file_name} has no tasks", file=role.path / file_name)
    only = Role(name=role.name, path=role.path, tasks=tasks, handlers=[], defaults=play.defaults)
    return Play(name=f"{role_name}/{file_name}", hosts=play.hosts, roles=[only], vars=play.vars, source=play.source,
                specs=play.specs, var_lines=play.var_lines)


def run_task_file(inv: Invocation, role_name: str, file_name: str, extra: dict[str, Any],
                  lock: bool = False) -> tuple[Runner, Any]:
    inventory, _ = inv.hosts()
    play = task_file_play(serving_play(inv.plays, inv.playbook), role_name, file_name)
    config = inv.run_config(extra_vars={**inv.extra_vars, **extra}, lock=lock)
    with ConsoleReporter(inv.human) as reporter:
        runner = Runner(inventory, config, reporter)
        result = runner.run([play])
    write_document(inv, inv.console, result)
    return runner, result


def _check_cell(check: dict[str, Any] | None) -> Text:
    if check is None:
        return Text("-", style="dim")
    if not check["ok"]:
        return Text(f"FAILED: {check['problem']}"[:100], style="red")
    return Text(f"{check['seconds']:.2f}s {check['answer'][:40]!r} ({check['finish_reason']}, {check['tokens']} tok)",
                style="green")


def smoke_table(result: Any) -> Table:
    table = Table(title="SMOKE", title_justify="left")
    for column in ("host", "ready", "text", "vision", "result"):
        table.add_column(column)
    for name, host in result.hosts.items():
        # the smoke task's own result (a reporting operation's data), not a name registered in YAML
        checks = next((task.data for task in host.tasks if task.role == SMOKE_ROLE and task.data), None)
        if host.failed or not checks or "smoke" not in checks:
            error = host.error or next((t.error for t in host.tasks if t.error), "") or "not checked"
            table.add_row(Text(name, style="red"), "-", "-", "-", Text(REDACTOR(error)[:160], style="red"))
            continue
        smoke = checks["smoke"]
        table.add_row(Text(name, style="green"), f"{checks['ready_seconds']:.0f}s", _check_cell(smoke["text"]),
                      _check_cell(smoke.get("vision")), Text("ok", style="green"))
    return table


def cmd_smoke(inv: Invocation) -> int:
    _, result = run_task_file(inv, SMOKE_ROLE, "tasks.yaml", {"smoke_every_run": True})
    inv.human.print(smoke_table(result))
    return EXIT_OK if result.ok else EXIT_FAILED


def cmd_rollback(inv: Invocation) -> int:
    _, result = run_task_file(inv, SERVING_ROLE, "rollback.yaml", {}, lock=True)
    human = inv.human
    human.print(recap_table(result))
    rolled_back = [name for name, host in result.hosts.items() if host.count(Status.CHANGED)]
    if rolled_back:
        # the inventory still asks for the release rolled back from: `up` converges to the inventory
        human.print(f"{', '.join(rolled_back)}: rolled back; the inventory still asks for the release rolled back "
                    "from, so the next `provision up` deploys it again. To stay on this one, set the inventory "
                    "to it (vllm_image, the flags) before the next `up`.", highlight=False, markup=False)
    return EXIT_OK if result.ok else EXIT_FAILED


def release_task(play: Play, playbook: Path) -> Task:
    """The serving play's `vllm_release` task: the arguments `up` deploys with."""
    task = next((t for t in play.tasks if t.op == RELEASE_OP), None)
    if task is None:
        raise InputError(f"the serving play has no {RELEASE_OP} task", file=playbook)
    return task


def host_services(play: Play, playbook: Path, hosts: list[Host],
                  extra_vars: dict[str, Any]) -> dict[str, tuple[ServiceSpec, list[str]]]:
    """Host name -> its service and `vllm serve ...` argv, rendered from the release task's `service`,
    `model` and `flags` and validated by the type `up` validates them with (no host touched): what
    `render` prints and what `status`, `bench` and `office-bench` check against."""
    task = release_task(play, playbook)
    env = make_environment(play.template_dirs)
    services = {}
    for host in hosts:
        renderer = Renderer(env, {**host_variables(play, host, extra_vars), "inventory_hostname": host.name,
                                  "facts": {}})
        try:
            try:
                service = ServiceSpec.model_validate(renderer.render(task.args["service"]))
            except ValidationError as error:  # said as `up` says it (Operation.arguments)
                raise ValueError("; ".join(f"service.{'.'.join(map(str, e['loc']))}: {e['msg']}"
                                           for e in error.errors())) from error
            model = renderer.render(task.args["model"])
            flags = renderer.render(task.args["flags"])
            services[host.name] = (service, ["vllm", "serve", *serve_arguments(str(model), flags)])
        except (TemplateError, FlagError, KeyError, ValueError) as error:
            raise InputError(f"host {host.name}: cannot render the vllm service: {error}",
                             file=task.source.file, line=task.source.line) from error
    return services


def rendered_arguments(inventory_sources: Path | list[Path], limit: str | None, extra_items: list[str], playbook: Path,
                       roles_dir: Path | None = None) -> dict[str, list[str]]:
    """`render`'s result for these inputs, as a library call (what `provision render` prints)."""
    sources = inventory_sources if isinstance(inventory_sources, list) else [inventory_sources]
    args = argparse.Namespace(command="render", inventory=None, inventory_sources=sources, limit=limit,
                              extra_vars=extra_items, playbook=playbook, roles_path=roles_dir)
    return rendered_of(Invocation(args, plain_console()))


def rendered_of(inv: Invocation) -> dict[str, list[str]]:
    """Host name -> `vllm serve ...` argv, from the release task's `model` and `flags` (no host touched)."""
    _, hosts = inv.validated()
    play = serving_play(inv.plays, inv.playbook)
    return {name: argv for name, (_, argv) in host_services(play, inv.playbook, hosts, inv.extra_vars).items()}


def cmd_render(inv: Invocation) -> int:
    rendered, console = rendered_of(inv), inv.console
    if inv.json:
        console.print_json(REDACTOR.json(rendered))
        return EXIT_OK
    for host, argv in rendered.items():
        console.print(f"# {host}", highlight=False, markup=False)
        for argument in argv:
            console.print(REDACTOR(argument), highlight=False, markup=False, soft_wrap=True)
    return EXIT_OK

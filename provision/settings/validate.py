"""Check every selected host's merged variables against the roles' declarations, before connecting.

Refused (exit 2, file:line:key of where the value was set, `-e` for extra vars):
- a variable no role declares (with "did you mean"), unless the inventory declares it itself:
  `vars_declared: [office_name]` or `vars_declared: {office_name: {type: str, description: ...}}`;
- a value of the wrong type, out of range or not one of the choices;
- an entry of a flag mapping (`vllm_extra_flags`) the program's own flag list does not have.
Ansible's own `ansible_*` variables pass (this tool ignores them) unless one looks like a misspelt
connection setting.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from provision.errors import InputError
from provision.inventory.model import CONNECTION_KEYS, Host, Inventory
from provision.settings.check import check_flags, check_value
from provision.settings.spec import Option, Specs
from provision.settings.variables import RoleDefaults, Value, effective
from provision.suggest import closest, did_you_mean

USER_DECLARED = "vars_declared"
#: names the engine itself gives every task
BUILTIN = frozenset({"inventory_hostname", "facts", "notified_handlers", USER_DECLARED})


class InvalidSettings(InputError):
    """Every problem found in the settings, one per line (the first one's place is the error's)."""

    def __init__(self, problems: list[InputError]) -> None:
        first = problems[0]
        super().__init__(first.message, first.file, first.line, first.key)
        self.problems = problems

    def __str__(self) -> str:
        return "\n".join(InputError.__str__(problem) for problem in self.problems)


def _problem(origin: Value, key: str, message: str) -> InputError:
    return InputError(message, origin.file if origin.file is not None else "-e", origin.line, key)


def user_declared(origin: Value | None) -> tuple[dict[str, Option], list[InputError]]:
    """The host's own declarations (`vars_declared`): names only, or name -> declaration."""
    if origin is None:
        return {}, []
    raw = origin.value
    if isinstance(raw, list) and all(isinstance(name, str) for name in raw):
        raw = {name: None for name in raw}
    if not isinstance(raw, Mapping):
        return {}, [_problem(origin, USER_DECLARED, "expected a list of variable names, or a mapping of names "
                                                     "to declarations (type:, description:)")]
    options: dict[str, Option] = {}
    for name, spec in raw.items():
        spec = spec or {}
        if not isinstance(spec, Mapping):
            return {}, [_problem(origin, f"{USER_DECLARED}.{name}", "expected a declaration (type:, description:)")]
        types = spec.get("type") or ["str", "int", "float", "bool", "list", "dict"]
        options[str(name)] = Option(
            name=str(name), types=tuple(types) if isinstance(types, list) else (types,),
            description=str(spec.get("description") or ""), role="inventory", file=origin.file or Path("-e"),
            line=origin.line, minimum=spec.get("min"), maximum=spec.get("max"),
            choices=tuple(spec.get("choices") or ()), secret=bool(spec.get("secret", False)))
    return options, []


def check_host(variables: dict[str, Value], specs: Specs) -> list[InputError]:
    """Every problem with one host's effective variables."""
    own, problems = user_declared(variables.get(USER_DECLARED))
    plain = {name: value.value for name, value in variables.items()}
    declared = {**specs.options, **own}
    for name in sorted(set(specs.options) - set(variables)):
        required = specs.options[name]
        chosen = [f"the {o.name} profile {variables[o.name].value!r} ({variables[o.name].where})"
                  for o in specs.profile_options if o.name in variables]
        problems.append(InputError(f"has no value: no role default, and {' or '.join(chosen) or 'no profile'} "
                                   "does not set it", required.file, required.line, name))
    for name, origin in variables.items():
        option = declared.get(name)
        if option is None:
            if name in BUILTIN:
                continue
            if name in CONNECTION_KEYS:  # only `-e` gets here: the inventory takes its own out of the variables
                problems.append(_problem(origin, name, "a connection setting is read from the inventory, not from -e "
                                         "(a value on the command line is in every process list); set it in the "
                                         "inventory (`!env NAME` for a secret), or -K for the sudo password"))
                continue
            if name.startswith("ansible_"):
                near = closest(name, CONNECTION_KEYS)
                if near:
                    problems.append(_problem(origin, name, f"not a connection setting (did you mean '{near}'?)"))
                continue
            problems.append(_problem(origin, name, "no role declares this variable"
                                     f"{did_you_mean(name, declared)}; declare your own under {USER_DECLARED}:"))
            continue
        problem = check_value(option, origin.value, plain)
        if problem:
            problems.append(_problem(origin, name, problem))
        elif isinstance(origin.value, Mapping):
            problems.extend(_problem(origin, f"{name}.{flag}", message)
                            for flag, message in check_flags(option, origin.value, plain))
    return problems


def validate_hosts(inventory: Inventory, hosts: list[Host], roles_dir: Path, specs: Specs,
                   extra_vars: dict[str, Any]) -> None:
    """Raise InvalidSettings naming every problem of the selected hosts (each place once)."""
    defaults = RoleDefaults.read(roles_dir)
    seen: dict[str, InputError] = {}
    for host in hosts:
        for problem in check_host(effective(host, inventory, defaults, extra_vars, specs), specs):
            seen.setdefault(str(problem), problem)
    if seen:
        raise InvalidSettings(sorted(seen.values(), key=lambda p: (str(p.file), p.line or 0, p.key or "")))

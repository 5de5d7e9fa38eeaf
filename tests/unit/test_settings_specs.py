"""The roles' declarations: every default declared and valid, every declaration with a default,
every variable a task or template reads declared (or registered by a task, or the engine's own)."""

from __future__ import annotations

from pathlib import Path

import jinja2
import pytest
import yaml
from jinja2 import meta

import provision.ops  # noqa: F401  (registers the products' template functions)
from provision.errors import InputError
from provision.playbook.templating import FUNCTIONS, make_environment
from provision.settings import load_specs, profiles
from provision.settings.check import check_flags, check_value, expected
from provision.settings.validate import BUILTIN
from provision.settings.variables import RoleDefaults

REPO = Path(__file__).resolve().parents[2]
ROLES = REPO / "roles"
SPECS = load_specs([ROLES])
DEFAULTS = RoleDefaults.read(ROLES)


def test_every_role_has_a_declaration_file():
    assert sorted(p.parent.parent.name for p in ROLES.glob("*/meta/argument_specs.yaml")) == \
        sorted(p.name for p in ROLES.iterdir() if p.is_dir())


def test_every_default_is_declared_by_its_own_role_and_passes_its_declaration():
    plain = {name: value.value for name, value in DEFAULTS.values.items()}
    for name, value in DEFAULTS.values.items():
        option = SPECS.get(name)
        assert option is not None, f"{value.where}: {name} is not declared"
        assert option.file.parent.parent == value.file.parent, f"{name} declared by another role"
        assert check_value(option, value.value, plain) is None, name
        if isinstance(value.value, dict):
            assert check_flags(option, value.value, plain) == [], name


def test_every_declaration_has_a_default_or_is_set_by_every_profile():
    [model] = SPECS.profile_options
    profile_sets = [set(profiles.read(model, name)) for name in profiles.names(model)]
    assert len(profile_sets) >= 4
    missing = set(SPECS.options) - set(DEFAULTS.values)
    for name, keys in zip(profiles.names(model), profile_sets, strict=True):
        assert missing <= keys, f"profile {name} lacks {sorted(missing - keys)}"


def plain_defaults() -> dict:
    return {name: value.value for name, value in DEFAULTS.values.items()}


def test_every_profile_passes_the_declarations():
    [model] = SPECS.profile_options
    for name in profiles.names(model):
        values = {key: item.value for key, item in profiles.read(model, name).items()}
        for key, value in values.items():
            option = SPECS.get(key)
            assert option is not None, f"{name}: {key} is not declared"
            assert check_value(option, value, values) is None, (name, key)
            if isinstance(value, dict):
                assert check_flags(option, value, {**plain_defaults(), **values}) == [], (name, key)


def test_a_model_architecture_needs_only_what_the_planner_reads():
    """Before: `layers` was required though the memory planner never reads it (it counts
    sliding.layers + full.layers); a profile or host that leaves it out is accepted, one that keeps
    it (every shipped profile) still is."""
    option = SPECS.get("model_architecture")
    planned = {"full": {"layers": 28, "kv_heads": 4, "head_dim": 128}, "weights_gib": 6.5,
               "max_position_embeddings": 128000}
    assert check_value(option, planned, {}) is None
    assert check_value(option, {**planned, "layers": 28}, {}) is None
    assert check_value(option, {"layers": 28, "weights_gib": 6.5, "max_position_embeddings": 128000}, {}) \
        == "full: missing (required)"


def _names(text: str, env: jinja2.Environment) -> set[str]:
    return set(meta.find_undeclared_variables(env.parse(text)))


def test_every_variable_read_by_a_task_or_template_is_declared_or_registered():
    env = jinja2.Environment()
    env.filters.update(make_environment().filters)  # the tool's own filters, the escaping ones included
    used: set[str] = set()
    registered: set[str] = set()

    def walk(value: object) -> None:
        if isinstance(value, str):
            used.update(_names(value, env))
        elif isinstance(value, dict):
            for item in value.values():
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)

    for path in ROLES.glob("*/templates/*.j2"):
        used.update(_names(path.read_text(), env))
    for path in [*ROLES.glob("*/tasks.yaml"), *ROLES.glob("*/handlers.yaml"), *ROLES.glob("*/rollback.yaml")]:
        for task in yaml.safe_load(path.read_text()) or []:
            registered.update([task["register"]] if "register" in task else [])
            for key, value in task.items():
                if key == "when":
                    for condition in value if isinstance(value, list) else [value]:
                        used.update(_names("{{ " + str(condition) + " }}", env))
                elif key != "register":
                    walk(value)
    globals_ = set(make_environment().globals)  # lookup() and the like: the environment's own
    assert sorted(used - set(SPECS.options) - registered - BUILTIN - set(FUNCTIONS) - globals_) == []


def test_the_message_of_a_mixed_type_lists_every_form():
    option = SPECS.get("max_model_len")
    assert expected(option, {"model_architecture": {"max_position_embeddings": 8192}}) == \
        "an integer from 1 to 8192 (model_architecture.max_position_embeddings), or 'auto'"


def test_a_template_value_is_checked_when_rendered_not_here():
    assert check_value(SPECS.get("max_num_seqs"), "{{ seqs }}", {}) is None


def test_a_variable_declared_twice_is_refused(tmp_path):
    for role in ("a", "b"):
        (tmp_path / role / "meta").mkdir(parents=True)
        (tmp_path / role / "meta" / "argument_specs.yaml").write_text(
            "options:\n  same:\n    type: str\n    description: twice\n")
    with pytest.raises(InputError, match="declared twice"):
        load_specs([tmp_path])


def test_a_declaration_needs_a_known_type_and_a_description(tmp_path):
    (tmp_path / "a" / "meta").mkdir(parents=True)
    spec = tmp_path / "a" / "meta" / "argument_specs.yaml"
    spec.write_text("options:\n  x:\n    type: integer\n    description: d\n")
    with pytest.raises(InputError, match=r"unknown type 'integer'.*did you mean 'int'"):
        load_specs([tmp_path])
    spec.write_text("options:\n  x:\n    type: int\n")
    with pytest.raises(InputError, match="description"):
        load_specs([tmp_path])

"""Jinja2 rendering of task arguments, `when` conditions and template files.

Undefined variables are errors (StrictUndefined), like Ansible's default. A string that is exactly
one expression (`"{{ ports }}"`) keeps its type (a list stays a list). Secrets are revealed when
rendered, because what is rendered goes to the host; everything shown to a person passes through
the redactor, which knows every secret value. Every template renders in the bounded sandbox
(sandbox.py); a value read from a host, a mirror or a bundle is data (unsafe.py): returned as it is,
never rendered, whatever it holds.
"""

from __future__ import annotations

import functools
import importlib
import json
import re
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import jinja2
import yaml

from provision import escape, products
from provision.playbook.template_cache import CachingEnvironment
from provision.playbook.unsafe import UnsafeText
from provision.sandbox import RUNAWAY, runaway
from provision.secrets import Secret, reveal
from provision.shell import quote

#: functions offered to templates (`{{ dpkg_lock_script() }}`), the products' through their hooks
#: (provision/products.py): name -> "module:function", imported when a template first calls it (so that
#: loading a playbook imports no product code)
FUNCTIONS: dict[str, str] = {"dpkg_lock_script": "provision.ops.dpkg_lock:dpkg_lock_script",
                             **products.template_functions()}
SINGLE_EXPRESSION = re.compile(r"^\{\{(?P<expr>(?:(?!\}\}).)*)\}\}$", re.DOTALL)


#: what a template's own expression can raise in Python (`{{ 1 + 'a' }}`, `{{ 1 // 0 }}`, `{{ x[9] }}`): the
#: template's error, reported as such (exit 2 where it is the user's), never a traceback
EVALUATION_ERRORS = (TypeError, ValueError, ArithmeticError, LookupError, AttributeError)


class TemplateError(Exception):
    """A template or expression failed to render: the message names the variable or syntax problem."""


def _has_template(value: Any) -> bool:
    if isinstance(value, UnsafeText):
        return False
    if isinstance(value, str):
        return "{{" in value or "{%" in value
    if isinstance(value, list):
        return any(_has_template(item) for item in value)
    if isinstance(value, dict):
        return any(_has_template(item) for item in value.values())
    return False


def _finalize(value: Any) -> Any:
    return value.reveal() if isinstance(value, Secret) else value


def _to_json(value: Any, **kwargs: Any) -> str:
    return json.dumps(reveal(value), **kwargs)


def _to_yaml(value: Any) -> str:
    return yaml.safe_dump(reveal(value), default_flow_style=False, sort_keys=False)


def make_environment(template_dirs: list[Path] | None = None) -> jinja2.Environment:
    env = CachingEnvironment(
        loader=jinja2.FileSystemLoader([str(d) for d in template_dirs or []]),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        finalize=_finalize,
        autoescape=False,
    )
    env.filters.update(to_json=_to_json, to_yaml=_to_yaml, bool=_to_bool, shquote=_shquote, combine=_combine,
                       from_bundle=_from_bundle)
    # each target syntax escaped by its one function (provision/escape.py)
    env.filters.update({name: _escaping(getattr(escape, name)) for name in ESCAPING_FILTERS})
    env.globals.update({name: _function(target) for name, target in FUNCTIONS.items()})
    env.tests.update(match=_regex_match, search=_regex_search, contains=_contains)
    return env


def _function(target: str) -> Callable[..., Any]:
    """The function `module:name`, imported at its first call (a template that never calls it costs nothing)."""
    module, _, name = target.partition(":")

    @jinja2.pass_context
    def call(context: jinja2.runtime.Context, *args: Any, **kwargs: Any) -> Any:
        function = getattr(importlib.import_module(module), name)
        if getattr(function, "jinja_pass_arg", None) is not None:  # it asked for the context too
            return function(context, *args, **kwargs)
        return function(*args, **kwargs)

    call.__name__ = name
    return call


def _regex_match(value: Any, pattern: str) -> bool:
    """Ansible's `match` test: the regular expression matches at the start of the string."""
    return re.match(pattern, str(value)) is not None


def _contains(value: Any, item: Any) -> bool:
    """Ansible's `contains` test: `item` is in the string or list `value`."""
    return item in value


def _regex_search(value: Any, pattern: str) -> bool:
    """Ansible's `search` test: the regular expression matches anywhere in the string."""
    return re.search(pattern, str(value)) is not None


def _combine(*mappings: dict[str, Any]) -> dict[str, Any]:
    """Ansible's `combine`: later mappings win, one level deep."""
    merged: dict[str, Any] = {}
    for mapping in mappings:
        merged.update(mapping)
    return merged


def _to_bool(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in {"1", "true", "yes", "on"}
    return bool(value)


@jinja2.pass_context
def _from_bundle(context: jinja2.runtime.Context, url: Any) -> str:
    """`URL | from_bundle`: where this host reads URL from: the offline bundle's copy of it
    (`<bundle_url>/<file>`: file://<bundle_path>/<file>, or the office cache's copy when the bundle
    seeded the cache) when the run has a bundle that carries it (`up --bundle`, which sets
    `bundle_host.urls`), else URL itself. One rule for every download a role names (an apt
    repository's key, a keyring package): `provision bundle` fetches what the URL gives."""
    text = str(_finalize(url))
    bundle_host = context.get("bundle_host")
    copies = bundle_host.get("urls") if isinstance(bundle_host, dict) else None
    if not copies or text not in copies:
        return text
    base = context.get("bundle_url") or f"file://{context.get('bundle_path')}"
    return f"{str(base).rstrip('/')}/{copies[text]}"


def _shquote(value: Any) -> str:
    return quote(_finalize(value))


ESCAPING_FILTERS = ("systemd_word", "systemd_value", "apt_conf_string", "deb822_value", "deb822_words",
                    "nginx_address")


def _escaping(function: Callable[[Any], str]) -> Callable[[Any], str]:
    """`function` as a filter: secrets revealed first, a value the target cannot hold a TemplateError."""
    def escaped(value: Any) -> str:
        try:
            return function(reveal(value))
        except ValueError as error:
            raise TemplateError(str(error)) from error

    escaped.__name__ = function.__name__
    return escaped


# Compiled once per environment (one per play, shared by its hosts) and text: compiling is most of a
# render's cost, and every host renders the same role texts, several times each (issue 13).
@functools.lru_cache(maxsize=4096)
def _template(env: jinja2.Environment, text: str) -> jinja2.Template:
    return env.from_string(text)


@functools.lru_cache(maxsize=4096)
def _expression(env: jinja2.Environment, expression: str) -> Callable[..., Any]:
    return env.compile_expression(expression, undefined_to_none=False)


def _run(template: jinja2.Template, variables: Variables) -> str:
    """`template.render(**variables)` without copying the variables into the context (shared: Jinja
    reads the mapping in place, see jinja2.runtime.new_context)."""
    context = template.new_context(variables, shared=True)  # type: ignore[arg-type]  # a Mapping is enough
    try:
        return template.environment.concat(template.root_render_func(context))  # type: ignore[attr-defined]
    except RUNAWAY as error:
        raise runaway(error) from None
    except Exception:
        return template.environment.handle_exception()


def _defined(value: Any) -> Any:
    """`value`, failing with its own message if an undefined is inside it (a function that read a
    variable that cannot be rendered, `vllm_serve_flags`, hands back what it read)."""
    if isinstance(value, jinja2.Undefined):
        value._fail_with_undefined_error()
    elif isinstance(value, dict):
        for item in value.values():
            _defined(item)
    elif isinstance(value, list):
        for item in value:
            _defined(item)
    return value


def _value(expression: Any, variables: Variables) -> Any:
    """A compiled expression's value over `variables`, read in place (what TemplateExpression.__call__
    does, less its copy of every variable)."""
    template = expression._template
    context = template.new_context(variables, shared=True)
    try:
        for _ in template.root_render_func(context):
            pass
    except RUNAWAY as error:
        raise runaway(error) from None
    return context.vars["result"]


@functools.lru_cache(maxsize=4096)
def _references(env: jinja2.Environment, text: str) -> tuple[frozenset[str], frozenset[str] | None]:
    """(variable names a template text reads, the `facts.NAME` fields it reads or None when it uses
    `facts` in a way that does not name one: `facts[key]`, `facts | to_json`)."""
    names: set[str] = set()
    fields: set[str] | None = set()

    def visit(node: jinja2.nodes.Node, parent: jinja2.nodes.Node | None) -> None:
        nonlocal fields
        if isinstance(node, jinja2.nodes.Name) and node.ctx == "load":
            names.add(node.name)
            if node.name == "facts" and fields is not None:
                if isinstance(parent, jinja2.nodes.Getattr):
                    fields.add(parent.attr)
                elif isinstance(parent, jinja2.nodes.Getitem) and isinstance(parent.arg, jinja2.nodes.Const):
                    fields.add(str(parent.arg.value))
                else:
                    fields = None
        for child in node.iter_child_nodes():
            visit(child, node)

    visit(env.parse(text), None)
    return frozenset(names), None if fields is None else frozenset(fields)


def facts_read(env: jinja2.Environment, values: list[Any], variables: dict[str, Any]) -> frozenset[str] | None:
    """The `facts` fields that rendering `values` can read, through the variables they name as well
    (`docker_repo_url: ".../{{ facts.os.id }}"`); None: all of them (a use that names none, or a
    template that does not parse, which fails with its own error when rendered)."""
    fields: set[str] = set()
    seen: set[str] = set()
    pending = list(values)
    while pending:
        value = pending.pop()
        if isinstance(value, dict):
            pending.extend(value.values())
        elif isinstance(value, list | tuple):
            pending.extend(value)
        elif isinstance(value, str) and _has_template(value):
            try:
                names, read = _references(env, value)
            except jinja2.TemplateSyntaxError:
                return None
            if read is None:
                return None
            fields |= read
            for name in names - seen:
                seen.add(name)
                if name in variables:
                    pending.append(variables[name])
    return frozenset(fields)


class Variables(Mapping[str, Any]):
    """One host's variables as Jinja reads them: a value that is itself a template is rendered at its
    first use, as Ansible does on use, and kept; the environment's globals come last. A run renders only
    the variables its tasks read, not every role default of the play for every host (issue 13), and a
    render reads this mapping in place instead of copying every variable into a new context per call.

    A variable that cannot be rendered (it names a result registered later, or itself) becomes an
    undefined that explains itself if it is used."""

    def __init__(self, renderer: Renderer, variables: dict[str, Any]) -> None:
        self._renderer = renderer
        self._raw = variables
        self._rendered: dict[str, Any] = {}
        self._rendering: set[str] = set()
        self._globals = renderer.env.globals

    def __getitem__(self, key: str) -> Any:
        if key in self._rendered:
            return self._rendered[key]
        if key not in self._raw:
            return self._globals[key]
        value = self._raw[key]
        # a secret written as a template (`hf_token: "{{ lookup('env', 'HF_TOKEN') }}"`) renders to a secret
        secret = isinstance(value, Secret) and _has_template(value.reveal())
        if not secret and not _has_template(value):
            self._rendered[key] = value
            return value
        if key in self._rendering:
            return self._renderer.env.undefined(hint=f"variable {key!r} cannot be rendered: it refers to itself",
                                                name=key)
        self._rendering.add(key)
        try:
            value = self._renderer.render(value.reveal()) if secret else self._renderer.render(value)
            value = Secret(str(value)) if secret else value
        except (TemplateError, jinja2.TemplateError) as error:
            value = self._renderer.env.undefined(hint=f"variable {key!r} cannot be rendered: {error}", name=key)
        finally:
            self._rendering.discard(key)
        self._rendered[key] = value
        return value

    def __contains__(self, key: object) -> bool:
        return key in self._raw or key in self._globals

    def __iter__(self) -> Iterator[str]:
        return iter({**self._globals, **self._raw})

    def __len__(self) -> int:
        return len(self._globals.keys() | self._raw.keys())

    def copy(self) -> dict[str, Any]:
        """Every variable, rendered (Jinja's Context.get_all() hands the mapping out, and copies it)."""
        return dict(self.items())


class Renderer:
    """Renders values against one host's variables (vars + facts + registered results).

    A variable whose value is itself a template (`docker_repo_url: "https://.../{{ facts.os.id }}"`)
    is rendered at its first use (`Variables`).
    """

    def __init__(self, env: jinja2.Environment, variables: dict[str, Any]) -> None:
        self.env = env
        self.variables = Variables(self, variables)

    def render(self, value: Any) -> Any:
        """Render strings inside any structure; single-expression strings keep their native type; data
        (UnsafeText) comes back as it is."""
        if isinstance(value, UnsafeText):
            return value
        if isinstance(value, str):
            return self._render_string(value)
        if isinstance(value, list):
            return [self.render(item) for item in value]
        if isinstance(value, dict):
            return {key: self.render(item) for key, item in value.items()}
        return _finalize(value)

    def _render_string(self, text: str) -> Any:
        if "{{" not in text and "{%" not in text:
            return text
        try:
            match = SINGLE_EXPRESSION.match(text.strip())
            if match:
                return reveal(_defined(self.evaluate(match.group("expr"))))
            return _run(_template(self.env, text), self.variables)
        except jinja2.TemplateError as error:
            raise TemplateError(f"{error} (in {text!r})") from error
        except EVALUATION_ERRORS as error:
            raise TemplateError(f"{type(error).__name__}: {error} (in {text!r})") from error

    def evaluate(self, expression: str) -> Any:
        """The value of one Jinja expression; an undefined name is an error, not None."""
        value = _value(_expression(self.env, expression), self.variables)
        if isinstance(value, jinja2.Undefined):
            value._fail_with_undefined_error()
        return value

    def condition(self, expression: str | list[str] | bool) -> bool:
        """Evaluate `when:` (a bare expression, or a list that must all hold)."""
        if isinstance(expression, bool):
            return expression
        expressions = expression if isinstance(expression, list) else [expression]
        for item in expressions:
            text = str(item).strip()
            if text.startswith("{{") and text.endswith("}}"):
                text = text[2:-2]
            try:
                if not self.evaluate(text):
                    return False
            except jinja2.TemplateError as error:
                raise TemplateError(f"{error} (in when: {text!r})") from error
            except EVALUATION_ERRORS as error:
                raise TemplateError(f"{type(error).__name__}: {error} (in when: {text!r})") from error
        return True

    def render_file(self, name: str) -> str:
        """Render a role template (templates/NAME) to text."""
        try:
            return _run(self.env.get_template(name), self.variables)
        except jinja2.TemplateNotFound as error:
            raise TemplateError(f"template not found: {name}") from error
        except jinja2.TemplateError as error:
            raise TemplateError(f"{name}: {error}") from error
        except EVALUATION_ERRORS as error:
            raise TemplateError(f"{name}: {type(error).__name__}: {error}") from error

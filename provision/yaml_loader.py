"""YAML that knows where every value came from: file:line for errors, no duplicate keys, secrets.

PyYAML's SafeLoader silently keeps the last of two equal keys and forgets line numbers once a
document is built. Every input error this tool reports must name the file, the line and the key,
so `LineTrackingLoader` indexes the node tree before building plain dicts and lists: the line of
each mapping key and value is kept in a side table keyed by the path to it, e.g.
`("all", "hosts", "lab1", "ansible_port")` (list items are int indices). The data itself stays
plain Python (dict, list, str, int, ...), so the rest of the code needs nothing special.

Tags: `!secret VALUE` gives a `Secret`; `!env NAME` gives the environment variable NAME as a Secret
(unset or empty is an error naming file:line, so a missing token fails before any host is touched).

Bounds, checked on the node tree before anything walks it (`_Shape`), each an error naming the
limit and the line: nesting deeper than `MAX_DEPTH` lists and mappings (every later walk, merges,
templating, JSON, recurses); aliases (`*name`, `<<: *name`) adding more than `MAX_ALIAS_VALUES`
values to what the document holds (the "billion laughs": nine levels of ten aliases make 10^9 values
from 4 KB; go-yaml refuses "excessive aliasing" the same way since Kubernetes' CVE-2019-11253); an
alias inside its own anchor (a structure that contains itself). PyYAML and Ansible bound none.
"""

from __future__ import annotations

import hashlib
import marshal
import os
from collections.abc import Hashable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from provision import controller_cache
from provision.errors import InputError
from provision.input_files import read_input_text
from provision.secrets import REDACTOR, Secret

YamlPath = tuple[Hashable, ...]
MERGE_TAG = "tag:yaml.org,2002:merge"
# the shipped roles nest 7 deep, an inventory's groups 2 levels a group; libyaml itself stops at 1000
MAX_DEPTH = 100
MAX_ALIAS_VALUES = 400_000


@dataclass(frozen=True)
class YamlDocument:
    """A loaded YAML file: plain `data`, plus the 1-based line of each mapping key and value."""

    data: Any
    source: Path | str
    key_lines: dict[YamlPath, int] = field(default_factory=dict)
    value_lines: dict[YamlPath, int] = field(default_factory=dict)

    def line(self, path: YamlPath) -> int | None:
        """Line of the key at `path`; else the nearest enclosing key's line (None for an empty path)."""
        for end in range(len(path), 0, -1):
            line = self.key_lines.get(path[:end]) or self.value_lines.get(path[:end])
            if line is not None:
                return line
        return self.value_lines.get(())

    def value_line(self, path: YamlPath) -> int | None:
        """Line where the value at `path` starts (differs from `line` for a block under its key)."""
        return self.value_lines.get(path) or self.line(path)


if TYPE_CHECKING:  # a mixin of PyYAML's loaders (below), typed as the loader it extends
    from yaml import SafeLoader as _Loader
else:
    _Loader = object


class _LineTracking(_Loader):
    """A SafeLoader that refuses duplicate keys, records lines by path and knows `!secret` / `!env`."""

    def __init__(self, stream: str | bytes, source: Path | str | None = None) -> None:
        super().__init__(stream)
        self.source: Path | str = source if source is not None else getattr(stream, "name", "<string>")
        self.key_lines: dict[YamlPath, int] = {}
        self.value_lines: dict[YamlPath, int] = {}
        self._node_paths: dict[int, YamlPath] = {}

    def get_single_data(self) -> Any:
        node = self.get_single_node()
        if node is None:
            return None
        _Shape(self.source).measure(node, 0, node.start_mark.line + 1)
        self._index(node, (), on_path=set())
        return self.construct_document(node)

    def construct_object(self, node: Node, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep)  # type: ignore[misc]
        except (ValueError, OverflowError) as error:  # an int of 5000 digits, a 30th of February
            reason = str(error).split(";")[0]
            raise InputError(f"cannot read this value: {reason}", self.source, node.start_mark.line + 1,
                             _key_name(self, node)) from None

    def _index(self, node: Node, path: YamlPath, on_path: set[int]) -> None:
        """Record lines under `node`, refusing duplicate keys; aliases are followed, cycles are not."""
        if id(node) in on_path:
            return
        self._node_paths.setdefault(id(node), path)
        self.value_lines.setdefault(path, node.start_mark.line + 1)
        on_path = on_path | {id(node)}
        if isinstance(node, SequenceNode):
            for index, item in enumerate(node.value):
                self._index(item, (*path, index), on_path)
        elif isinstance(node, MappingNode):
            self._refuse_duplicates(node)
            self.flatten_mapping(node)  # resolves `<<:` merge keys; explicit keys come last and win
            for key_node, value_node in node.value:
                key = self._key(key_node)
                self.key_lines[(*path, key)] = key_node.start_mark.line + 1
                self.value_lines.pop((*path, key), None)
                self._index(value_node, (*path, key), on_path)

    def _refuse_duplicates(self, node: MappingNode) -> None:
        seen: set[Hashable] = set()
        for key_node, _ in node.value:
            if key_node.tag == MERGE_TAG:
                continue
            key = self._key(key_node)
            if key in seen:
                raise InputError(
                    "duplicate key (it is already set above in the same mapping; remove one)",
                    self.source, key_node.start_mark.line + 1, str(key),
                )
            seen.add(key)

    def _key(self, key_node: Node) -> Hashable:
        line = key_node.start_mark.line + 1
        if not isinstance(key_node, ScalarNode):
            raise InputError("a mapping key must be a plain value, not a list or mapping", self.source, line)
        key = self.construct_object(key_node, deep=True)
        if isinstance(key, Secret):
            raise InputError("a mapping key cannot be !secret or !env", self.source, line)
        return key

    def path_of(self, node: Node) -> YamlPath | None:
        return self._node_paths.get(id(node))


class _Shape:
    """The bounds of the module docstring, measured once per node: an aliased node's expanded size
    and height are remembered, so a billion laughs costs its 4 KB of nodes, never its 10^9."""

    def __init__(self, source: Path | str) -> None:
        self.source = source
        self.measured: dict[int, tuple[int, int]] = {}  # id(node) -> (values it expands to, height)
        self.open: set[int] = set()
        self.added = 0

    def measure(self, node: Node, depth: int, line: int) -> tuple[int, int]:
        """(values, height) of `node` at `depth`; `line`: where the entry holding it is written."""
        known = self.measured.get(id(node))
        if known is not None:  # a second use: an alias
            self.added += known[0]
            if self.added > MAX_ALIAS_VALUES:
                raise InputError(f"aliases expand this document by more than {MAX_ALIAS_VALUES:,} values (the"
                                 " limit; a 'billion laughs'?): write the values out, or use fewer aliases",
                                 self.source, line)
            self._check_depth(depth + known[1], line)
            return known
        if id(node) in self.open:
            raise InputError("an alias inside the anchor it names: a structure that contains itself",
                             self.source, node.start_mark.line + 1)
        self._check_depth(depth, node.start_mark.line + 1)
        size, height = 1, 0
        self.open.add(id(node))
        for child, child_line in _children(node):
            child_size, child_height = self.measure(child, depth + 1, child_line)
            size, height = size + child_size, max(height, child_height + 1)
        self.open.discard(id(node))
        self.measured[id(node)] = (size, height)
        return size, height

    def _check_depth(self, depth: int, line: int) -> None:
        if depth > MAX_DEPTH:
            raise InputError(f"nested deeper than {MAX_DEPTH} levels of lists and mappings (the limit)",
                             self.source, line)


def _children(node: Node) -> list[tuple[Node, int]]:
    """The nodes under `node`, each with the line of its entry (a mapping's key, a list's start)."""
    if isinstance(node, SequenceNode):
        return [(item, node.start_mark.line + 1) for item in node.value]
    if isinstance(node, MappingNode):
        return [(child, key.start_mark.line + 1) for key, value in node.value for child in (key, value)]
    return []


class LineTrackingLoader(_LineTracking, getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """The fast one (libyaml's parser, ~5x PyYAML's): every file is read with it."""


class ExactErrorLoader(_LineTracking, yaml.SafeLoader):  # type: ignore[misc]
    """PyYAML's own parser: a file libyaml refused is read again with it, for PyYAML's error text and
    line (libyaml words some errors differently and places some a line later)."""


def _construct_secret(loader: LineTrackingLoader, node: Node) -> Secret:
    if not isinstance(node, ScalarNode):
        raise InputError("!secret takes a single value (a string)", loader.source, node.start_mark.line + 1,
                         _key_name(loader, node))
    return Secret(loader.construct_scalar(node))


def _construct_env(loader: LineTrackingLoader, node: Node) -> Secret:
    line = node.start_mark.line + 1
    key = _key_name(loader, node)
    name = loader.construct_scalar(node) if isinstance(node, ScalarNode) else ""
    if not name or not isinstance(name, str):
        raise InputError("!env takes the name of an environment variable, e.g. !env HF_TOKEN",
                         loader.source, line, key)
    value = os.environ.get(name)
    if value is None:
        raise InputError(f"environment variable {name} is not set (export it, or remove this line)",
                         loader.source, line, key)
    if not value:
        raise InputError(f"environment variable {name} is empty", loader.source, line, key)
    return Secret(value)


def _key_name(loader: _LineTracking, node: Node) -> str | None:
    path = loader.path_of(node)
    return str(path[-1]) if path else None


VAULT_WAY_OUT = ("Ansible Vault is not supported: decrypt the value (ansible-vault decrypt) and read secrets"
                 " from the environment instead (`name: !env NAME`)")


def _construct_vault(loader: LineTrackingLoader, node: Node) -> None:
    raise InputError(f"!vault value: {VAULT_WAY_OUT}", loader.source, node.start_mark.line + 1,
                     _key_name(loader, node))


def refuse_vault_text(text: str, path: Path) -> None:
    """InputError when `text` (of `path`) is a whole file encrypted with Ansible Vault (`$ANSIBLE_VAULT;...`)."""
    if text.startswith("$ANSIBLE_VAULT;"):
        raise InputError(f"this file is encrypted with Ansible Vault. {VAULT_WAY_OUT}", path, 1)


for _loader in (LineTrackingLoader, ExactErrorLoader):
    _loader.add_constructor("!vault", _construct_vault)
    _loader.add_constructor("!secret", _construct_secret)
    _loader.add_constructor("!env", _construct_env)


def load_yaml_text(text: str, source: Path | str) -> YamlDocument:
    """Parse one YAML document; any problem becomes an InputError naming `source` and the line."""
    try:
        return _load(LineTrackingLoader, text, source)
    except yaml.YAMLError as fast_error:
        if isinstance(fast_error, yaml.MarkedYAMLError) and "maximum nesting depth" in str(fast_error.problem):
            raise InputError(f"nested deeper than {MAX_DEPTH} levels of lists and mappings (the limit)", source,
                             fast_error.problem_mark.line + 1 if fast_error.problem_mark else None) from None
        try:
            _load(ExactErrorLoader, text, source)
        except yaml.YAMLError as error:
            raise _yaml_input_error(error, source) from None
        except RecursionError:  # PyYAML's composer recurses: past ~300 levels only libyaml's error is left
            pass
        raise _yaml_input_error(fast_error, source) from None


def _load(loader_class: type[_LineTracking], text: str, source: Path | str) -> YamlDocument:
    loader = loader_class(text, source)
    try:
        data = loader.get_single_data()
    finally:
        loader.dispose()
    return YamlDocument(data, source, loader.key_lines, loader.value_lines)


def _yaml_input_error(error: yaml.YAMLError, source: Path | str) -> InputError:
    if isinstance(error, yaml.MarkedYAMLError):
        return _input_error(error, source)
    return InputError(f"YAML error: {error}", source)


def _input_error(error: yaml.MarkedYAMLError, source: Path | str) -> InputError:
    """PyYAML's error as ours: the line where the problem was found, and where its context began."""
    mark = error.problem_mark or error.context_mark
    line = mark.line + 1 if mark else None
    problem = error.problem or "invalid YAML"
    if problem.startswith("could not determine a constructor for the tag"):
        return InputError(f"unknown tag {problem.rsplit(' ', 1)[-1]} (known tags: !secret, !env)", source, line)
    context = ""
    if error.context and error.context_mark:
        start = error.context_mark.line + 1
        context = f" ({error.context}" + (f" started at line {start})" if start != line else ")")
    return InputError(f"YAML syntax error: {problem}{context}", source, line)


def load_yaml_file(path: Path, cached: bool = False) -> YamlDocument:
    """Read and parse `path` (UTF-8, bounded: `input_files`); an unreadable or Vault-encrypted file is
    an InputError naming it. `cached`: the parsed document is kept in the controller's cache, by the
    file's text (the playbook and the roles, which every run reads whole: not an inventory, whose
    values may be passwords)."""
    text = read_input_text(path)
    refuse_vault_text(text, path)
    if not cached:
        return load_yaml_text(text, path)
    return _cached_document(text, path)


# what decides a parsed document besides the text: the interpreter, PyYAML, and this module's code
_PARSER_VERSION = controller_cache.version_of(yaml.__version__, sources=(Path(__file__),))


def _cached_document(text: str, path: Path) -> YamlDocument:
    """The document of `text` as parsed before (marshal, as `__pycache__` keeps code: the 49 files of
    the shipped roles read back in 2.3 ms, parsed in 23.5 ms), else parsed now and kept.
    A document holding a secret (`!secret`, `!env`: marshal refuses the type) or a value marshal
    cannot write (a YAML date) is parsed every time; an error is never kept."""
    digest = hashlib.sha256(f"{_PARSER_VERSION}\0{path}\0{text}".encode()).hexdigest()[:40]
    cache_file = controller_cache.folder("yaml") / f"{digest}.marshal"
    stored = controller_cache.read(cache_file)
    if stored is not None:
        try:
            data, key_lines, value_lines = marshal.loads(stored)
            return YamlDocument(data, path, key_lines, value_lines)
        except (ValueError, EOFError, TypeError):
            pass
    document = load_yaml_text(text, path)
    try:
        blob = marshal.dumps((document.data, document.key_lines, document.value_lines))
    except ValueError:
        return document
    if not REDACTOR.touches(text):
        controller_cache.write(cache_file, blob)
    return document

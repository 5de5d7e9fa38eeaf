"""`-e` extra variables, the highest-precedence layer (Ansible's `--extra-vars`).

Each item is one of:
  `key=value`      the value is read as a YAML scalar: `-e max_model_len=65536` is an int,
                   `-e flag=true` a bool, `-e ver=1.10` the float 1.1 (quote to keep a string:
                   `-e 'ver="1.10"'`); several `a=1 b=2` in one item, as Ansible allows;
                   `-e hf_token='!env HF_TOKEN'` reads the environment.
  `@file.yaml`     a YAML file holding a mapping (errors name file:line).
  `{"a": 1}`       an inline JSON/YAML mapping; the way to pass lists and dicts.
Later items win. Secret-looking names (hf_token, api_key, ...) become Secrets, as in the inventory.
"""

from __future__ import annotations

import datetime
import re
import shlex
from pathlib import Path
from typing import Any

from provision.errors import InputError
from provision.inventory.vars import mark_secrets
from provision.secrets import REDACTOR, Secret
from provision.yaml_loader import YamlDocument, load_yaml_file, load_yaml_text

VARIABLE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
SECRET_WORD = re.compile(r"token|passw|secret|api_?key", re.IGNORECASE)
SCALAR_TYPES = (str, int, float, bool, datetime.date, Secret)
SHOWN_LENGTH = 80  # an item quoted in an error: enough to recognise it, not a 100 KB document


def parse_extra_vars(items: list[str]) -> dict[str, Any]:
    """The variables given by `-e` items, merged in order (later wins)."""
    variables: dict[str, Any] = {}
    for item in items:
        variables.update(_parse_item(item))
    return mark_secrets(variables)


def _parse_item(item: str) -> dict[str, Any]:
    text = item.strip()
    if text.startswith("@"):
        return _mapping_of(load_yaml_file(Path(text[1:]).expanduser()), item)
    if text.startswith("{"):
        try:
            return _mapping_of(load_yaml_text(text, "-e"), item)
        except InputError as error:
            raise InputError(f"cannot read {_shown(item)}: {error.message}", key="-e") from None
    if "=" in text:
        return dict(_assignment(part, item) for part in _assignments(text))
    raise InputError(f"expected key=value, @file.yaml or a {{...}} mapping, got {_shown(item)}", key="-e")


def _assignments(text: str) -> list[str]:
    """`a=1 b=2` splits into two assignments only when every word is one; else it is one value."""
    try:
        words = shlex.split(text)
    except ValueError:
        return [text]
    if len(words) > 1 and all(VARIABLE_NAME.fullmatch(word.partition("=")[0]) and "=" in word
                              for word in words):
        return words
    return [text]


def _assignment(text: str, item: str) -> tuple[str, Any]:
    name, _, raw = text.partition("=")
    name = name.strip()
    if not VARIABLE_NAME.fullmatch(name):
        raise InputError(f"{name!r} is not a variable name (letters, digits, _) in {_shown(item)}", key="-e")
    return name, _scalar(raw, name, item)


def _scalar(raw: str, name: str, item: str) -> Any:
    if not raw.strip():
        return raw
    try:
        value = load_yaml_text(raw, "-e").data
    except InputError as error:
        if raw.lstrip().startswith("!"):  # a tag (!env NAME) that failed: say why
            raise InputError(f"{name}: {error.message}", key="-e") from None
        return raw  # not YAML (e.g. `--flag: x`): the text itself
    if value is None or isinstance(value, SCALAR_TYPES):
        return value
    raise InputError(f"{name}: a key=value item takes a single value; pass lists and mappings as"
                     f" -e '{{\"{name}\": ...}}' or -e @file.yaml", key="-e")


def _mapping_of(doc: YamlDocument, item: str) -> dict[str, Any]:
    if doc.data is None:
        return {}
    if not isinstance(doc.data, dict):
        raise InputError(f"expected a mapping of variables, got {type(doc.data).__name__} ({_shown(item)})",
                         doc.source, doc.value_line(()), "-e")
    for key in doc.data:
        if not isinstance(key, str) or not VARIABLE_NAME.fullmatch(key):
            raise InputError(f"{key!r} is not a variable name (letters, digits, _)",
                             doc.source, doc.line((key,)), str(key))
    return doc.data


def _shown(item: str) -> str:
    """The item as it may appear in an error: cut short before any value when it looks secret."""
    if SECRET_WORD.search(item):
        return repr(re.split(r"[=:]", item, maxsplit=1)[0] + "=...")
    shown = REDACTOR(item)
    return repr(shown if len(shown) <= SHOWN_LENGTH else shown[:SHOWN_LENGTH] + "...")

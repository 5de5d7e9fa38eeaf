"""Does one value fit its declaration? Pure functions returning the problem as text, or None.

The message says what is expected as a whole ("an integer from 1 to 262144, or 'auto'") and what was
given, so a refusal never contradicts itself: each accepted type is listed with its own limits.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from provision.escape import control_character
from provision.secrets import Secret, reveal
from provision.settings.flags import FlagList
from provision.settings.formats import FORMATS
from provision.settings.spec import Option
from provision.suggest import did_you_mean

PLAIN_INT = re.compile(r"\s*[-+]?\d+(_\d+)*\s*")  # what Python's int() reads
# vLLM's human_readable_int (vllm/utils/argparse_utils.py): 25.6k, 8G, 2K; never 1.5K (binary, decimal)
HUMAN_INT = re.compile(r"\s*(\d+(\.\d+)?[kmgt]|\d+[KMGT]|[-+]?\d+(_\d+)*)\s*")
NUMBER_TYPES = {"int": "an integer", "float": "a number"}
FLAG_NUMBERS = {**NUMBER_TYPES, "human_int": "an integer (or 8k, 2G)"}
# `host`: a host name or IP address, nothing that could end a line of a config it is written into


def is_template(value: Any) -> bool:
    """A string rendered on use (`{{ ... }}`): its type is known only then, so it is not checked here."""
    return isinstance(value, str) and ("{{" in value or "{%" in value)


def lookup(variables: Mapping[str, Any], dotted: str) -> Any:
    """`a.b` in `variables` (None when any part is missing)."""
    value: Any = variables
    for part in dotted.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return None
        value = value[part]
    return value


def _bound(bound: Any, variables: Mapping[str, Any]) -> tuple[float | None, str]:
    """A limit: a number, or the name of a variable holding one (shown beside the number)."""
    if isinstance(bound, str):
        value = lookup(variables, bound)
        return (value, f" ({bound})") if isinstance(value, (int, float)) and not isinstance(value, bool) else (None, "")
    return bound, ""


def _range_text(option: Option, variables: Mapping[str, Any]) -> str:
    low, low_name = _bound(option.minimum, variables)
    high, high_name = _bound(option.maximum, variables)
    if low is not None and high is not None:
        return f" from {low}{low_name} to {high}{high_name}"
    if low is not None:
        return f" of at least {low}{low_name}"
    return f" of at most {high}{high_name}" if high is not None else ""


def expected(option: Option, variables: Mapping[str, Any]) -> str:
    """What the option takes, in words: every accepted type with its limits, joined by "or"."""
    words = []
    choices = ", ".join(repr(c) for c in option.choices)
    for kind in option.types:
        if kind in NUMBER_TYPES:
            words.append(NUMBER_TYPES[kind] + _range_text(option, variables))
        elif kind == "str" and option.format:
            words.append(FORMATS[option.format].words + (f", or {choices}" if choices else ""))
        elif kind == "str":
            words.append(f"one of {choices}" if len(option.choices) > 1 else (choices or "a string"))
        elif kind == "list" and option.format:
            words.append(f"a list of items each {FORMATS[option.format].words}")
        else:
            words.append({"bool": "true or false", "list": "a list", "dict": "a mapping",
                          "path": "an absolute path"}[kind])
    return ", or ".join(dict.fromkeys(words))


def _is(kind: str, value: Any) -> bool:
    if kind == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "float":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind == "str":
        return isinstance(value, (str, Secret))
    if kind == "path":
        return isinstance(value, str) and value.startswith(("/", "~"))
    return isinstance(value, {"bool": bool, "list": list, "dict": dict}[kind])


def _within(kind: str, value: Any, option: Option, variables: Mapping[str, Any]) -> bool:
    if kind in NUMBER_TYPES:
        low, _ = _bound(option.minimum, variables)
        high, _ = _bound(option.maximum, variables)
        return (low is None or value >= low) and (high is None or value <= high)
    if kind in ("str", "path") and option.format:
        return reveal(value) in option.choices or _formatted(option.format, value)
    if kind == "str" and option.choices:
        return value in option.choices
    if kind == "list" and option.format:
        return all(_formatted(option.format, item) for item in value if isinstance(item, str))
    return True


def _formatted(name: str, value: Any) -> bool:
    text = value.reveal() if isinstance(value, Secret) else str(value)
    return is_template(text) or bool(FORMATS[name].pattern.fullmatch(text))


def shown(value: Any, secret: bool) -> str:
    if secret or isinstance(value, Secret):
        return "a secret value"
    return "null" if value is None else repr(value)


def check_value(option: Option, value: Any, variables: Mapping[str, Any]) -> str | None:
    """The problem with `value` for `option`, or None when it fits."""
    if is_template(value):
        return None
    bad = _control_character(value)
    if bad:
        where, character = bad
        return (f"{where}holds the control character {character} (a line break, NUL, escape...), which no "
                "setting may hold: it would change the file or script it is written into")
    if any(_is(kind, value) and _within(kind, value, option, variables) for kind in option.types):
        return _check_keys(option, value, variables) if option.suboptions and isinstance(value, Mapping) else None
    return f"expected {expected(option, variables)}; got {shown(value, option.secret)}"


def _control_character(value: Any, where: str = "") -> tuple[str, str] | None:
    """(where, the character) of the first control character in a string of `value` (also in the keys
    and items of a mapping or list; templates are checked when rendered), or None."""
    if isinstance(value, Secret):
        value = value.reveal()
    if isinstance(value, str):
        bad = None if is_template(value) else control_character(value)
        return (f"{where}: " if where else "", bad) if bad else None
    items: list[tuple[str, Any]] = []
    if isinstance(value, Mapping):
        names = {key: repr(str(key)) if control_character(str(key)) else str(key) for key in value}
        items = [(f"{where}.{names[key]}" if where else names[key], item) for key, item in value.items()]
        items += [(f"{where}.{names[key]}" if where else names[key], str(key)) for key in value]
    elif isinstance(value, list):
        items = [(f"{where}[{index}]", item) for index, item in enumerate(value)]
    for inner, item in items:
        found = _control_character(item, inner)
        if found:
            return found
    return None


def _check_keys(option: Option, value: Mapping[Any, Any], variables: Mapping[str, Any]) -> str | None:
    """The first problem of a mapping with declared keys: unknown, missing (required) or a bad value."""
    for key in value:
        if key not in option.suboptions:
            return f"{key}: not a key of {option.name}{did_you_mean(str(key), option.suboptions)}"
    for key, sub in option.suboptions.items():
        if key not in value:
            if sub.required:
                return f"{key}: missing (required)"
            continue
        problem = check_value(sub, value[key], variables)
        if problem:
            nested = sub.suboptions and problem.split(":")[0] in sub.suboptions
            return f"{key}.{problem}" if nested else f"{key}: {problem}"
    return None


def managed(option: Option, variables: Mapping[str, Any]) -> dict[str, str]:
    """Flag -> the variable that sets it: `managed_flags`, where the key `named` names a variable
    holding more such pairs (roles/vllm: vllm_named_flags)."""
    pairs = {flag: var for flag, var in option.managed_flags.items() if flag != "named"}
    named = variables.get(option.managed_flags.get("named", ""))
    return {**pairs, **(named if isinstance(named, Mapping) else {})}


def check_flags(option: Option, value: Mapping[Any, Any], variables: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(flag, problem) for each entry of a flag mapping that the program would refuse."""
    flags = option.flags
    if flags is None:
        return []
    owned = managed(option, variables)
    problems = []
    for name, flag_value in value.items():
        name = str(name)
        if name.startswith("-"):
            problems.append((name, f"write the flag without its dashes: {name.lstrip('-')!r}"))
            continue
        if name in owned:
            problems.append((name, f"set by the variable {owned[name]}; set that instead"))
            continue
        kind = flags.kind(name)
        if kind is None:
            problems.append((name, f"not a flag of {flags.version}{did_you_mean(name, flags.names)}"))
        elif flag_value is None or is_template(flag_value):
            continue
        elif flag_value is False and kind == "off":
            problems.append((name, f"already the off form; write {name.removeprefix('no-')}: false"))
        elif flag_value is False and kind != "bool":
            problems.append((name, f"--{name} takes a value; false (--no-{name}) is not one of its forms"))
        elif flag_value is True and kind not in ("bool", "flag", "off", "bool_or_str"):
            problems.append((name, f"--{name} takes a value; true (a bare --{name}) is not one"))
        else:
            problem = flag_value_problem(flags, name, kind, flag_value)
            if problem:
                problems.append((name, problem))
    return problems


def flag_value_problem(flags: FlagList, name: str, kind: str, value: Any) -> str | None:
    """Why the program's parser would refuse `--name value` (each item of a list, which renders as
    several values): by the option's type (`int("8k")` fails where human_readable_int reads it) and its
    choices, both as vLLM's parser has them (roles/vllm/meta/vllm-serve-flags.txt)."""
    for item in value if isinstance(value, list) else [value]:
        if isinstance(item, bool) and kind in ("int", "human_int", "float"):
            return f"--{name} takes {FLAG_NUMBERS[kind]}; got {item!r}"
        if kind in ("int", "human_int") and not (PLAIN_INT if kind == "int" else HUMAN_INT).fullmatch(str(item)):
            return f"--{name} takes {FLAG_NUMBERS[kind]}; got {item!r}"
        if kind == "float" and not isinstance(item, (int, float)):
            return f"--{name} takes {FLAG_NUMBERS[kind]}; got {item!r}"
        choices = flags.choices.get(name)
        if choices and str(item) not in choices:
            listed = ", ".join(c if kind == "int" else repr(c) for c in choices)
            return (f"--{name} takes one of {listed} ({flags.version}); got {item!r}"
                    f"{did_you_mean(str(item), choices)}")
    return None

"""The stand-in's command line: vLLM's real `vllm serve` options, read from `vllm_flags.txt`.

The option list is data extracted from vLLM's own parser (see extract_flags.py), so the stand-in
accepts exactly what the real server accepts and rejects the rest with the real messages (exit 2).
Argument pre-processing mirrors vllm/utils/argparse_utils.py FlexibleArgumentParser.parse_args:
underscores in option names become dashes, `-O3` means `--optimization-level 3`, dotted JSON keys
(`--compilation-config.mode 3`) are merged into one JSON value, and a `--model` given to `vllm serve`
is moved to the positional slot.
"""

from __future__ import annotations

import argparse
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

FLAGS_FILE = Path(__file__).with_name("vllm_flags.txt")
SUBCOMMANDS = (
    "chat", "complete", "serve", "launch", "bench", "collect-env", "download-kernels", "preload",
    "run-batch", "snapshot",
)
SERVE_USAGE = "vllm serve [model_tag] [options]"
API_SERVER_DESCRIPTION = "vLLM OpenAI-Compatible RESTful API server."


@dataclass(frozen=True)
class FlagSpec:
    """One argparse option of the real server: its spellings and how its value is read."""

    spellings: tuple[str, ...]
    kind: str
    off_spellings: tuple[str, ...] = ()
    optional: bool = False
    nargs: str | None = None
    append: bool = False
    choices: tuple[str, ...] = ()


@dataclass
class FlagTable:
    """All options plus the values vLLM checks when it builds its config (`@values` lines)."""

    specs: list[FlagSpec] = field(default_factory=list)
    post_parse_values: dict[str, tuple[str, ...]] = field(default_factory=dict)


def load_flag_table(path: Path = FLAGS_FILE) -> FlagTable:
    """Read vllm_flags.txt (format described in its header)."""
    table = FlagTable()
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        words = line.split()
        if words[0] == "@values":
            table.post_parse_values[words[1]] = tuple(words[2].split("|"))
            continue
        options = dict(word.split("=", 1) for word in words[2:])
        table.specs.append(
            FlagSpec(
                spellings=tuple(words[0].split(",")),
                kind=words[1],
                off_spellings=tuple(options["off"].split(",")) if "off" in options else (),
                optional=options.get("optional") == "1",
                nargs=options.get("nargs"),
                append=options.get("action") == "append",
                choices=tuple(options["choices"].split("|")) if "choices" in options else (),
            )
        )
    return table


# --- value parsers, named like vLLM's so argparse prints the same "invalid NAME value" messages ---


def human_readable_int(value: str) -> int:
    """vLLM's human_readable_int: '25.6k' -> 25600, '1K' -> 1024, plain integers as is."""
    value = value.strip()
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([kKmMgGtT])", value)
    if match:
        number, suffix = match.groups()
        decimal = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
        if suffix in decimal:
            return int(float(number) * decimal[suffix])
        binary = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
        try:
            return int(number) * binary[suffix]
        except ValueError as error:
            raise argparse.ArgumentTypeError(
                f"Decimals are not allowed with binary suffixes like {suffix}. "
                f"Did you mean to use {number}{suffix.lower()} instead?"
            ) from error
    return int(value)


def human_readable_int_or_auto(value: str) -> int:
    """vLLM's human_readable_int_or_auto: like human_readable_int, and 'auto'/-1 mean -1."""
    if value.strip() == "-1" or value.strip().lower() == "auto":
        return -1
    return human_readable_int(value)


def loads(value: str) -> Any:
    """json.loads under the name argparse reports."""
    return json.loads(value)


def union_dict_and_str(value: str) -> Any:
    """vLLM's union_dict_and_str: a JSON object when it looks like one, else the string."""
    if not re.match(r"(?s)^\s*{.*}\s*$", value):
        return value
    return _optional_type(loads)(value)


def _parse_type(return_type: Any) -> Any:
    def _parse(value: str) -> Any:
        try:
            return return_type(value)
        except ValueError as error:
            raise argparse.ArgumentTypeError(
                f"Value {value} cannot be converted to {_type_repr(return_type)}."
            ) from error

    _parse.__name__ = "_parse_type"
    return _parse


def _optional_type(return_type: Any) -> Any:
    def _optional(value: str) -> Any:
        if value in ("", "None"):
            return None
        return _parse_type(return_type)(value)

    _optional.__name__ = "_optional_type"
    return _optional


def _type_repr(return_type: Any) -> str:
    if return_type is loads:
        return repr(json.loads)
    return repr(return_type)


KIND_TYPES: dict[str, Any] = {
    "int": int,
    "float": float,
    "str": str,
    "json": loads,
    "human_int": human_readable_int,
    "human_int_or_auto": human_readable_int_or_auto,
    "dict_or_str": union_dict_and_str,
}


class EnableDisableAction(argparse.Action):
    """vLLM's boolean option: the listed 'on' spellings store True, the 'off' spellings False."""

    def __init__(self, option_strings: list[str], dest: str, off: tuple[str, ...] = (), **kwargs: Any):
        super().__init__(option_strings, dest, nargs=0, **kwargs)
        self.off = set(off)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        setattr(namespace, self.dest, option_string not in self.off)


def _add_spec(parser: argparse.ArgumentParser, spec: FlagSpec) -> None:
    long_names = [s for s in spec.spellings if s.startswith("--")]
    dest = long_names[0][2:].replace("-", "_")
    if spec.kind == "bool":
        parser.add_argument(*spec.spellings, *spec.off_spellings, dest=dest, action=EnableDisableAction,
                            off=spec.off_spellings, default=None)
        return
    if spec.kind == "flag":
        parser.add_argument(*spec.spellings, dest=dest, action="store_true")
        return
    if spec.kind == "hf_token":
        parser.add_argument(*spec.spellings, dest=dest, type=str, nargs="?", const=True)
        return
    kwargs: dict[str, Any] = {"dest": dest}
    value_type = KIND_TYPES[spec.kind]
    if spec.kind == "json" and not spec.optional:
        value_type = _parse_type(loads)
    kwargs["type"] = _optional_type(value_type) if spec.optional else value_type
    if spec.choices:
        typed = [value_type(c) if value_type in (int, float) else c for c in spec.choices]
        kwargs["choices"] = [*typed, *([None] if spec.optional else [])]
    if spec.nargs:
        kwargs["nargs"] = spec.nargs if spec.nargs in ("+", "?", "*") else int(spec.nargs)
    if spec.append:
        kwargs["action"] = "append"
    parser.add_argument(*spec.spellings, **kwargs)


def add_serve_arguments(parser: argparse.ArgumentParser, table: FlagTable) -> argparse.ArgumentParser:
    """Add the positional model and every real option to `parser` (make_arg_parser's job)."""
    parser.add_argument("model_tag", type=str, nargs="?")
    for spec in table.specs:
        _add_spec(parser, spec)
    return parser


def build_vllm_cli_parser(table: FlagTable) -> argparse.ArgumentParser:
    """The `vllm` command: subcommands like the real CLI; only `serve` is implemented."""
    parser = argparse.ArgumentParser(prog="vllm", description="vLLM CLI")
    parser.add_argument("-v", "--version", action="store_true")
    subparsers = parser.add_subparsers(required=False, dest="subparser")
    for name in SUBCOMMANDS:
        if name == "serve":
            add_serve_arguments(subparsers.add_parser(name, usage=SERVE_USAGE), table)
        else:
            subparsers.add_parser(name)
    return parser


def build_api_server_parser(table: FlagTable, prog: str = "api_server.py") -> argparse.ArgumentParser:
    """`python3 -m vllm.entrypoints.openai.api_server`: the same options without subcommands."""
    return add_serve_arguments(argparse.ArgumentParser(prog=prog, description=API_SERVER_DESCRIPTION), table)


def preprocess_serve_args(args: list[str]) -> list[str]:
    """Apply FlexibleArgumentParser's rewriting to `vllm serve ...` style arguments."""
    if args[:1] == ["serve"]:
        args = _move_model_to_front(args)
    processed: list[str] = []
    for index, arg in enumerate(args):
        if arg.startswith("--"):
            key, sep, value = arg.partition("=")
            processed.append(re.sub(r"(?<=--)[^\.]*", lambda m: m.group(0).replace("_", "-"), key, count=1)
                             + sep + value)
        elif arg.startswith("-O") and arg != "-O":
            processed += ["--optimization-level", arg[3:] if arg[2:3] == "=" else arg[2:]]
        elif arg == "-O" and index + 1 < len(args) and args[index + 1] in {"0", "1", "2", "3"}:
            processed.append("--optimization-level")
        else:
            processed.append(arg)
    return _merge_dotted_json_args(processed)


def _move_model_to_front(args: list[str]) -> list[str]:
    for index, arg in enumerate(args):
        if re.match(r"^--model(=.+|$)", arg):
            if arg == "--model":
                return ["serve", args[index + 1], *args[1:index], *args[index + 2:]]
            return ["serve", arg.removeprefix("--model="), *args[1:index], *args[index + 1:]]
    if (len(args) > 1 and args[1].startswith("-")
            and not any(re.match(r"^--config(=.+|$)", a) for a in args)
            and any(re.match(r"^--served[-_]model[-_]name(=.+|$)", a) for a in args)):
        raise ValueError(
            "`model` should be provided as the first positional argument when using `vllm serve`. "
            "i.e. `vllm serve <model> --<arg> <value>`."
        )
    return args


def _merge_dotted_json_args(args: list[str]) -> list[str]:
    merged: dict[str, dict[str, Any]] = {}
    kept: list[str] = []
    skip_next = False
    for index, arg in enumerate(args):
        if skip_next:
            skip_next = False
            continue
        if not (arg.startswith("-") and "." in arg.partition("=")[0]):
            kept.append(arg)
            continue
        name, sep, value_text = arg.partition("=")
        if not sep:
            value_text = args[index + 1] if index + 1 < len(args) else ""
            skip_next = True
        key, *path = name.split(".")
        try:
            value: Any = json.loads(value_text)
        except json.JSONDecodeError:
            value = value_text
        target = merged.setdefault(key, {})
        for part in path[:-1]:
            target = target.setdefault(part, {})
        target[path[-1]] = value
    for key, value in merged.items():
        kept += [key, json.dumps(value)]
    return kept

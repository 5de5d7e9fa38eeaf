"""A model profile's flags (a mapping) as the `vllm serve` argument vector, by one generic rule.

The profile and the inventory hold flags as data (`max-model-len: 131072`); nothing writes a flag by
hand. The rule, in mapping order:
    value None    -> the flag is left out (an override's way to drop a profile flag)
    true          -> `--flag`            false -> `--no-flag` (vLLM's boolean options have both)
    mapping       -> `--flag '{"k":1}'`  (compact JSON, as vLLM's JSON options read it)
    list          -> `--flag a b`        (vLLM's multi-valued options are nargs=+, where a repeated
                                          flag would keep only its last value)
    anything else -> `--flag value`
Keys may use `_` or `-` (vLLM accepts both); argv always has dashes. Secrets never go on a command
line (`ps` shows it): `api-key` and `hf-token` are refused here, they belong in the env file.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

REFUSED_FLAGS = {
    "api-key": "the API key is vllm_api_key (a root-only file the container reads), never on the command line",
    "hf-token": "the Hugging Face token is hf_token (used by the download only), never on the command line",
    "model": "the model is the profile's `model`, given as vLLM's positional argument",
}


class FlagError(ValueError):
    """A flag mapping that cannot become a safe vLLM command line."""


def flag_name(key: str) -> str:
    """`max_model_len` or `--max-model-len` -> `max-model-len`."""
    name = str(key).strip().lstrip("-").replace("_", "-")
    if not name or any(c.isspace() for c in name):
        raise FlagError(f"{key!r} is not a flag name")
    return name


def _scalar(value: Any) -> str:
    if isinstance(value, float):
        return repr(value)
    return str(value)


def flags_to_argv(flags: Mapping[str, Any]) -> list[str]:
    """The arguments for `flags`, by the rule in the module docstring."""
    argv: list[str] = []
    for key, value in flags.items():
        name = flag_name(key)
        if name in REFUSED_FLAGS:
            raise FlagError(f"flag {name!r} refused: {REFUSED_FLAGS[name]}")
        if value is None:
            continue
        if value is True:
            argv.append(f"--{name}")
        elif value is False:
            argv.append(f"--no-{name}")
        elif isinstance(value, Mapping):
            argv += [f"--{name}", json.dumps(value, separators=(",", ":"))]
        elif isinstance(value, list | tuple):
            if not value:
                raise FlagError(f"flag {name!r} has an empty list (use null to leave it out)")
            argv += [f"--{name}", *(_scalar(item) for item in value)]
        else:
            argv += [f"--{name}", _scalar(value)]
    return argv


def serve_arguments(model: str, flags: Mapping[str, Any]) -> list[str]:
    """What follows `vllm serve` (and the image name, whose entrypoint is `vllm serve`)."""
    if not model or model.startswith("-"):
        raise FlagError(f"model {model!r} is not a model name")
    return [model, *flags_to_argv(flags)]


def fingerprint(arguments: list[str]) -> str:
    """A short, stable identity of an argument vector (for the release record)."""
    return hashlib.sha256("\0".join(arguments).encode()).hexdigest()[:16]

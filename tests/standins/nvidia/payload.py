"""The stand-ins' own files (scripts, units, configs) in payload/, rendered with build-time values.

Placeholders are `@NAME@`; `@KERNELFS@` includes payload/kernelfs.sh, so the scripts that simulate
kernel state share one implementation yet stay single files on the host.
"""

from __future__ import annotations

import re
from pathlib import Path

PAYLOAD_DIR = Path(__file__).parent / "payload"
_PLACEHOLDER = re.compile(r"@([A-Z][A-Z0-9_]*)@")


def render(name: str, **values: str) -> bytes:
    """payload/NAME with every @KEY@ replaced; a placeholder without a value is an error."""
    text = (PAYLOAD_DIR / name).read_text(encoding="utf-8")
    values = {"KERNELFS": (PAYLOAD_DIR / "kernelfs.sh").read_text(encoding="utf-8"), **values}

    def substitute(match: re.Match[str]) -> str:
        key = match.group(1)
        if key not in values:
            raise KeyError(f"payload/{name}: no value for @{key}@")
        return values[key]

    return _PLACEHOLDER.sub(substitute, text).encode("utf-8")


def query_gpu_fields() -> list[str]:
    """Every field name (aliases included) that nvidia-smi 580's --help-query-gpu lists."""
    return (PAYLOAD_DIR / "query-gpu-fields.txt").read_text(encoding="utf-8").split()

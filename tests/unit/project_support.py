"""Writing a small project (inventory, playbooks, roles) for a unit test to run."""

from __future__ import annotations

import textwrap
from pathlib import Path


def write(path: Path, text: str) -> Path:
    """Write `text`, dedented and without its first newline, creating the folders on the way."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip("\n"))
    return path

"""A real command behind a counting shim: how many times a probe script ran it."""

from __future__ import annotations

import os
import shutil
from pathlib import Path


def counting(command: str, folder: Path) -> dict[str, str]:
    """An environment whose PATH finds, first, a `command` that notes each call in folder/calls and
    then runs the real one."""
    folder.mkdir()
    real = shutil.which(command)
    (folder / command).write_text(f'#!/bin/sh\necho x >> {folder}/calls\nexec {real} "$@"\n')
    (folder / command).chmod(0o755)
    return {**os.environ, "PATH": f"{folder}:{os.environ['PATH']}"}


def calls(folder: Path) -> int:
    """How many times the shim in `folder` ran since it was made (or its count was removed)."""
    count = folder / "calls"
    return len(count.read_text().splitlines()) if count.exists() else 0

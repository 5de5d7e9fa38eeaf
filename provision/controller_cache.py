"""The controller's cache folder, and the one way a file is kept in it.

`$PROVISION_CACHE_DIR`, else `$XDG_CACHE_HOME/provision`, else `~/.cache/provision`; a subfolder per
use: `probes/` (the probes a play used on a host, runner/probe_memory.py), `templates/` (compiled
Jinja templates, playbook/template_cache.py) and `yaml/` (parsed role YAML,
inventory/yaml_loader.py). Files are the user's own (0600 in 0700 folders) and each is written whole
(a temporary file renamed over it), so a reader finds the old file or the new one. Everything here
is a hint, as Python's `__pycache__` is: a missing, foreign or broken file costs time, never a wrong
answer, and a controller that cannot write here still runs.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sys
import tempfile
from pathlib import Path


def folder(name: str) -> Path:
    """The cache subfolder `name` (not created here)."""
    if root := os.environ.get("PROVISION_CACHE_DIR"):
        return Path(root) / name
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "provision" / name


def read(path: Path) -> bytes | None:
    """The file's bytes; None when it cannot be read."""
    try:
        return path.read_bytes()
    except OSError:
        return None


def write(path: Path, data: bytes) -> bool:
    """Keep `data` as `path` (0600, its folder made 0700), whole or not at all; False when it could not."""
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}-", suffix=path.suffix)
        try:
            with os.fdopen(handle, "wb") as out:
                out.write(data)
            os.replace(temporary, path)
            return True
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
    return False


def version_of(*parts: str, sources: tuple[Path, ...] = ()) -> str:
    """A key part naming what produced a cached file: the interpreter, `parts` (library versions) and
    the text of our `sources` that decide the result (provision's version where they are not readable:
    an install without its .py files)."""
    texts = [sys.implementation.cache_tag or sys.version, *parts]
    for source in sources:
        try:
            texts.append(source.read_text(encoding="utf-8"))
        except OSError:
            from provision import __version__

            texts.append(f"provision {__version__}")
    return hashlib.sha256("\0".join(texts).encode()).hexdigest()

"""The controller's cache folder, and the one way a file is kept in it and read back.

`$PROVISION_CACHE_DIR`, else `$XDG_CACHE_HOME/provision`, else `~/.cache/provision`; a subfolder per
use: `probes/` (the probes a play used on a host, runner/probe_memory.py), `templates/` (compiled
Jinja templates, playbook/template_cache.py) and `yaml/` (parsed role YAML,
yaml_loader.py). Files are the user's own (0600 in 0700 folders) and each is written whole
(a temporary file renamed over it), so a reader finds the old file or the new one. Everything here
is a hint, as Python's `__pycache__` is: a missing, foreign or broken file costs time, never a wrong
answer, and a controller that cannot write here still runs.

What is read back decides what runs (compiled template code is executed, remembered probes are sent
as root scripts), so an entry is used only if it is ours: its folder passes OpenSSH's StrictModes
test (below) and the entry carries an HMAC-SHA256 made with the user's own key
(`$XDG_CONFIG_HOME/provision/cache.key`, else `~/.config/provision/cache.key`, 0600, made on first
use). The key lives outside the cache folder on purpose: a cache folder copied in from elsewhere (a
restored CI cache, a shared volume, an old cache that was once writable by others) holds no key,
so none of its entries is used. Anything else is ignored with one warning on stderr naming the
path and why, and the run goes on without it.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import os
import secrets
import stat
import sys
import tempfile
import threading
from pathlib import Path

from provision.shell import quote

KEY_BYTES = 32
FORMAT = "hmac-sha256 1"  # part of every key (version_of): entries of an older format are never looked up
MAC_BYTES = hashlib.sha256().digest_size

_lock = threading.Lock()
_trusted_folders: set[str] = set()  # folders found safe in this process (as OpenSSH checks once per use)
_keys: dict[str, bytes] = {}
_warned: set[tuple[str, str]] = set()


def folder(name: str) -> Path:
    """The cache subfolder `name` (not created here)."""
    if root := os.environ.get("PROVISION_CACHE_DIR"):
        return Path(root) / name
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "provision" / name


def key_path() -> Path:
    """The file of the key that authenticates this user's cache entries."""
    return Path(_config_home()) / "provision" / "cache.key"


def _config_home() -> str:
    return os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")


def read(path: Path) -> bytes | None:
    """The entry's bytes if the entry is ours (see the module's docstring); None when it is missing,
    unreadable or not to be trusted (with a warning)."""
    stored = _read_own(path, private=False, consequence="not used")
    key = _key() if stored is not None else None
    if stored is None or key is None:
        return None
    mac, data = stored[:MAC_BYTES], stored[MAC_BYTES:]
    if not hmac.compare_digest(mac, _mac(key, path, data)):
        _warn(path.parent, f"entries whose HMAC does not match this user's key ({key_path()}) are not used: "
                           "they were not written by this user's provision")
        return None
    return data


def write(path: Path, data: bytes) -> bool:
    """Keep `data` as `path` (0600, its folder made 0700), whole or not at all, with its HMAC; False
    when it could not (or the folder is not safe to use: warned)."""
    key = _key()
    if key is None or not _make_folder(path.parent):
        return False
    with contextlib.suppress(OSError):
        handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}-", suffix=path.suffix)
        try:
            with os.fdopen(handle, "wb") as out:
                out.write(_mac(key, path, data) + data)
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
    texts = [FORMAT, sys.implementation.cache_tag or sys.version, *parts]
    for source in sources:
        try:
            texts.append(source.read_text(encoding="utf-8"))
        except OSError:
            from provision import __version__

            texts.append(f"provision {__version__}")
    return hashlib.sha256("\0".join(texts).encode()).hexdigest()


def _mac(key: bytes, path: Path, data: bytes) -> bytes:
    """The entry's HMAC, over its subfolder and name too: an entry is valid only where it was written."""
    return hmac.new(key, f"{path.parent.name}/{path.name}\0".encode() + data, hashlib.sha256).digest()


def _unsafe_file(status: os.stat_result, private: bool) -> str | None:
    """Why a file could have been written (or, `private`, read) by another user; None if it cannot."""
    if not stat.S_ISREG(status.st_mode):
        return "it is not a regular file"
    if status.st_uid != os.getuid():
        return f"it is owned by uid {status.st_uid}, not by this user (uid {os.getuid()})"
    loose = 0o077 if private else 0o022
    if status.st_mode & loose:
        return f"its mode {stat.S_IMODE(status.st_mode):04o} lets others {'read or ' if private else ''}write it"
    return None


def _unsafe_folder(path: Path) -> str | None:
    """Why another user could write in `path` or swap it; None if none can.

    OpenSSH's StrictModes test (sshd_config(5); openssh-portable misc.c `safe_path`, which ssh also
    applies to ~/.ssh/config): the canonical path's folder and every folder above it, up to the
    home folder or /, owned by the user or root and not group- or world-writable. Two differences:
    the cache folder itself must be the user's, and a folder above it may be world-writable if it is
    sticky (/tmp: there only an entry's owner can rename or remove it, so it cannot be swapped)."""
    if str(path) in _trusted_folders:
        return None
    real = os.path.realpath(path)
    home = os.path.realpath(os.path.expanduser("~"))
    uid, current, own = os.getuid(), real, True
    while True:
        try:
            status = os.stat(current)
        except OSError as error:
            return f"{current} cannot be checked ({error.strerror})"
        mode = stat.S_IMODE(status.st_mode)
        if not stat.S_ISDIR(status.st_mode):
            return f"{current} is not a folder"
        if status.st_uid != uid and (own or status.st_uid != 0):
            return f"folder {current} is owned by uid {status.st_uid}, not by this user (uid {uid})"
        if mode & 0o022 and (own or not mode & stat.S_ISVTX):
            return (f"folder {current} (mode {mode:04o}) can be written by other users "
                    f"(chmod go-w {quote(current)} if that is not meant)")
        parent = os.path.dirname(current)
        if current == home or parent == current:
            break
        current, own = parent, False
    with _lock:
        _trusted_folders.add(str(path))
    return None


def _make_folder(path: Path) -> bool:
    """`path` made (each missing folder 0700, whatever the umask) and safe to use; False (warned) if not."""
    missing = []
    current = path
    while not current.exists() and current.parent != current:
        missing.append(current)
        current = current.parent
    try:
        for made in reversed(missing):
            with contextlib.suppress(FileExistsError):
                os.mkdir(made, 0o700)
                os.chmod(made, 0o700)
    except OSError:
        return False
    why = _unsafe_folder(path)
    if why is not None:
        _warn(path, f"not used: {why}")
    return why is None


def _key() -> bytes | None:
    """This user's cache key, made on first use; None (warned) when the key file is not safe."""
    if (known := _keys.get(_config_home())) is not None:  # a read per entry: no Path made for it
        return known
    path = key_path()
    key = _read_key(path)
    if key is None and not path.exists() and _make_folder(path.parent):
        key = _new_key(path)
    if key is not None:
        with _lock:
            _keys[_config_home()] = key
    return key


def _read_key(path: Path) -> bytes | None:
    key = _read_own(path, private=True, consequence="this key is not used, nor the cache")
    if key is not None and len(key) != KEY_BYTES:
        _warn(path, f"this key is not used, nor the cache: it is not a key of {KEY_BYTES} bytes")
        return None
    return key


def _read_own(path: Path, private: bool, consequence: str) -> bytes | None:
    """The file's bytes if it is the user's own, in a folder only the user can change (not followed
    if it is a link); None if it is missing, or not to be used (warned: `consequence` and why)."""
    try:
        handle = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as error:
        _warn(path, f"{consequence}: it cannot be read ({error.strerror})")
        return None
    with os.fdopen(handle, "rb") as file:
        if (why := _unsafe_folder(path.parent)) is not None:
            _warn(path.parent, f"{consequence}: {why}")
            return None
        if (why := _unsafe_file(os.fstat(file.fileno()), private)) is not None:
            _warn(path, f"{consequence}: {why}")
            return None
        try:
            return file.read()
        except OSError as error:
            _warn(path, f"{consequence}: it cannot be read ({error.strerror})")
            return None


def _new_key(path: Path) -> bytes | None:
    """A new random key, written whole before it is linked in place: two first runs at once agree on
    the one that was linked first."""
    try:
        handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=".cache.key-")
    except OSError:
        return None
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(secrets.token_bytes(KEY_BYTES))
        with contextlib.suppress(FileExistsError):
            os.link(temporary, path)
    except OSError:
        return None
    finally:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
    return _read_key(path)


def _warn(path: Path, why: str) -> None:
    """One warning per path and reason in a run: the cache is a hint, its loss is not an error."""
    with _lock:
        if (str(path), why) in _warned:
            return
        _warned.add((str(path), why))
    print(f"warning: controller cache {path}: {why}", file=sys.stderr)

"""Reading a file the user named (inventory, vars, `-e @file`, playbook, roles, `--limit @file`, a bundle's
manifest) so that no file can hang the tool, exhaust its memory or end in a traceback.

- Only a regular file is read: a FIFO would block on open until someone writes to it, `/dev/zero`
  never ends, a folder is not text. The file is opened non-blocking and checked with `fstat` on the
  open descriptor, so nothing swapped in after a check can block either.
- At most `MAX_INPUT_BYTES` are read; a larger file is refused, naming the limit (the largest real
  inputs, a 10 000-host inventory or a bundle's manifest, are well under 1 MiB).
- The text must be UTF-8; an error names the line and column of the first bad byte.
- A dangling symbolic link or a loop of them names the link, not "file not found".
Ansible reads all of these without a bound (a FIFO as inventory hangs `ansible-inventory`).
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from provision.errors import InputError

MAX_INPUT_BYTES = 16 * 1024 * 1024
MAX_INPUT_SIZE = "16 MiB"


def read_input_bytes(path: Path) -> bytes:
    """The bytes of the regular file `path` (at most MAX_INPUT_BYTES), or an InputError naming it."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as error:
        raise _open_error(path, error) from None
    mode = os.fstat(descriptor).st_mode
    if not stat.S_ISREG(mode):
        os.close(descriptor)
        raise InputError(f"not a regular file ({_kind(mode)}): give the path of a file", path)
    with os.fdopen(descriptor, "rb") as handle:
        try:
            data = handle.read(MAX_INPUT_BYTES + 1)
        except OSError as error:
            raise InputError(f"cannot read: {error.strerror}", path) from None
    if len(data) > MAX_INPUT_BYTES:
        raise InputError(f"larger than {MAX_INPUT_SIZE}, the limit for an input file: is this the right file?", path)
    return data


def read_input_text(path: Path) -> str:
    """The UTF-8 text of `path` (see `read_input_bytes`); bytes that are not UTF-8 are an InputError
    naming the line and column of the first one."""
    data = read_input_bytes(path)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data.count(b"\n", 0, error.start) + 1
        column = error.start - (data.rfind(b"\n", 0, error.start) + 1) + 1
        raise InputError(f"not UTF-8 text: byte 0x{data[error.start]:02x} at column {column} (a binary file, "
                         "or another encoding: save it as UTF-8)", path, line) from None


def folder_inside(folder: Path, above: list[Path]) -> list[Path]:
    """`above` and `folder` (resolved), the folders a recursive read is inside; an InputError when
    `folder` is one of them (a link to a folder above it: the read would never end)."""
    real = folder.resolve()
    if real in above:
        raise InputError(f"a link to {real}, a folder it is already inside: a loop", folder)
    return [*above, real]


def _open_error(path: Path, error: OSError) -> InputError:
    if error.errno == errno.ENOENT:
        if path.is_symlink():
            return InputError(f"a symbolic link to {os.readlink(path)}, which does not exist", path)
        return InputError("file not found", path)
    if error.errno == errno.ELOOP:
        return InputError("a loop of symbolic links (it never reaches a file)", path)
    return InputError(f"cannot read: {error.strerror}", path)


def _kind(mode: int) -> str:
    kinds = {stat.S_ISDIR: "a folder", stat.S_ISFIFO: "a FIFO", stat.S_ISSOCK: "a socket",
             stat.S_ISCHR: "a character device", stat.S_ISBLK: "a block device"}
    return next((name for test, name in kinds.items() if test(mode)), "not a file")

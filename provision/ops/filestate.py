"""The state of one path on a host (type, mode, owner, sha256, content) and what it takes to change it.

Shared by the file-like operations (file, template, json_merge, lineinfile, ini). Content comes back
only up to CONTENT_CAP bytes (as escaped text when small printable ASCII, else base64); beyond that, and
for secret files, plans compare sha256 only. A symlink is followed: its target is what is read and written.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from dataclasses import dataclass
from functools import partial
from typing import Any

from provision.errors import TaskFailed
from provision.facts.stat_rows import PATH_LINE, STAT_FORMAT
from provision.ops.base import Operation, Plan, Probe
from provision.ops.scripting import atomic_write_script, chown_spec, quick_block
from provision.shell import Command, parse_fields, quote

CONTENT_CAP = 1024 * 1024
# A small file of printable ASCII (tabs and newlines too: a config file) is read by bash itself and sent
# as `text=`, backslashes and newlines escaped: no base64 process (~2 ms of the host's CPU a file, in
# every run that reads it). `read -d ''` stops at a NUL byte: the length check sends such a file, and
# any other byte, as base64, so the content that comes back is the file's, byte for byte.
TEXT_CAP = 4096
TEXT_OR_BASE64 = r"""if [ "$size" -le TEXT_CAP ] && { IFS= read -r -d '' body < "$p"; [ "${#body}" -eq "$size" ]; } \
    && [[ $body != *[!$'\t\n'[:print:]]* ]]; then
    body=${body//'\'/'\\'}; printf 'text=%s\n' "${body//$'\n'/'\n'}"
  else SEND_IT; fi""".replace("TEXT_CAP", str(TEXT_CAP))
DEFAULT_MODE = "0644"
SECRET_DEFAULT_MODE = "0600"


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def file_state_probe(path: str, *, want_content: bool = True, unless_sha256: str | None = None) -> Probe[FileState]:
    """`path`'s state (the content only when wanted and its sha256 is not the given one), parsed."""
    small = f'[ "$size" -le {CONTENT_CAP} ]'
    hash_it = 'sha=$(sha256sum < "$p"); sha=${sha%% *}; echo "sha256=$sha"'
    send_it = 'echo "content=$(base64 -w0 < "$p")"'
    if not want_content:
        read_file = hash_it
    elif unless_sha256:
        read_file = f'{hash_it}\n  if {small} && [ "$sha" != {quote(unless_sha256)} ]; then {send_it}; fi'
    else:  # the content comes back: its sha256 is taken by the controller (parse_file_state), not here
        read_file = f"if {small}; then {TEXT_OR_BASE64.replace('SEND_IT', send_it)}\n  else {hash_it}; fi"
    body = f"""
{PATH_LINE}{quote(path)}
if [ -L "$p" ]; then p=$(readlink -f -- "$p"); echo "target=$p"; fi
attributes() {{
  local row='' line
  while IFS= read -r line; do [ "${{line#* * * * * * }}" = "$p" ] && {{ row=${{line%" $p"}}; break; }}
  done <<<"${{_stat_rows:-}}"
  [ -n "$row" ] || row=$(stat -c '{STAT_FORMAT}' -- "$p")
  set -- $row
  echo "mode=$1"; echo "uid=$2"; echo "gid=$3"; echo "owner=$4"; echo "group=$5"; size=$6
}}
if [ -d "$p" ]; then echo type=directory; attributes
elif [ -f "$p" ]; then
  echo type=file; attributes; echo "size=$size"
  {read_file}
elif [ -e "$p" ]; then echo type=other
else echo type=absent
fi
"""
    return Probe(quick_block(body), partial(parse_file_state, path))


@dataclass(frozen=True)
class FileState:
    """What the probe saw at a path. `kind` is file, directory, other or absent."""

    path: str
    kind: str
    mode: str | None = None
    uid: str | None = None
    gid: str | None = None
    owner: str | None = None
    group: str | None = None
    size: int | None = None
    sha256: str | None = None
    content: bytes | None = None

    @property
    def exists(self) -> bool:
        return self.kind != "absent"

    def text(self) -> str | None:
        """The content as text, or None when it was not read or is not UTF-8."""
        if self.content is None:
            return None
        try:
            return self.content.decode()
        except UnicodeDecodeError:
            return None


def parse_file_state(path: str, state: str) -> FileState:
    """Parse file_state_probe output; output without a `type` line is refused, never read as absent
    (an edit planned on a file that only seems missing would overwrite the user's content)."""
    fields = parse_fields(state)
    if "type" not in fields:
        raise TaskFailed(f"the probe of {path} printed nothing usable: {state.strip()[:200]!r}")
    content = None
    if "text" in fields:  # TEXT_OR_BASE64: printable ASCII, backslashes and newlines escaped
        content = re.sub(r"\\([\\n])", lambda m: "\n" if m.group(1) == "n" else "\\", fields["text"]).encode()
    elif "content" in fields:
        try:
            content = base64.b64decode(fields["content"], validate=True)
        except binascii.Error as error:
            raise TaskFailed(f"{path}: unreadable probe output ({error})") from error
    mode = fields.get("mode")
    return FileState(
        path=fields.get("target") or path,
        kind=fields["type"],
        mode=f"{int(mode, 8):04o}" if mode else None,
        uid=fields.get("uid"),
        gid=fields.get("gid"),
        owner=fields.get("owner"),
        group=fields.get("group"),
        size=int(fields["size"]) if fields.get("size", "").isdigit() else None,
        sha256=fields.get("sha256") or (sha256_hex(content) if content is not None else None),
        content=content,
    )


def attribute_changes(current: FileState, owner: str | None, group: str | None, mode: str | None) -> list[str]:
    """Human-readable differences of owner/group/mode from what is wanted (None: don't care)."""
    changes = []
    if owner is not None and owner not in (current.owner, current.uid):
        changes.append(f"owner {current.owner} -> {owner}")
    if group is not None and group not in (current.group, current.gid):
        changes.append(f"group {current.group} -> {group}")
    if mode is not None and mode != current.mode:
        changes.append(f"mode {current.mode} -> {mode}")
    return changes


def attributes_plan(current: FileState, owner: str | None, group: str | None, mode: str | None, *,
                    ok: str) -> Plan:
    """The plan for a path whose content is as wanted: its owner/group/mode set in place, or none
    (summary `ok`) when they are as wanted too."""
    changes = attribute_changes(current, owner, group, mode)
    if not changes:
        return Plan.ok(ok)
    return Plan(changed=True, steps=[set_attributes_command(current.path, owner, group, mode)],
                summary=f"{current.path}: " + ", ".join(changes))


def require_regular_file(current: FileState) -> None:
    """Refuse to treat a directory (or device, socket) as a file."""
    if current.kind in ("directory", "other"):
        raise TaskFailed(f"{current.path} exists and is not a regular file ({current.kind})")


def write_file_command(
    current: FileState, content: bytes, *, owner: str | None, group: str | None, mode: str | None,
    secret: bool = False, description: str = "", validate: list[str] | None = None,
) -> Command:
    """Write `content` atomically; unspecified attributes keep the existing file's (or defaults);
    with `validate`, that program (the temporary file's path appended) must accept it first."""
    if current.exists:
        owner = owner or current.uid
        group = group or current.gid
        mode = mode or current.mode
    mode = mode or (SECRET_DEFAULT_MODE if secret else DEFAULT_MODE)
    script = atomic_write_script(
        current.path, mode=mode, owner_group=chown_spec(owner, group), create_parent=not current.exists,
        validate=validate,
    )
    return Command(script=script, data=content, description=description or f"write {current.path}")


def set_attributes_command(path: str, owner: str | None, group: str | None, mode: str | None) -> Command:
    """chown/chmod an existing path in place (only the given attributes)."""
    lines = []
    spec = chown_spec(owner, group)
    if spec:
        lines.append(f"chown -- {quote(spec)} {quote(path)}")
    if mode:
        lines.append(f"chmod -- {quote(mode)} {quote(path)}")
    return Command(script="\n".join(lines), description=f"set attributes of {path}")


def read_text_for_edit(current: FileState, cap: int = CONTENT_CAP) -> str:
    """The text of a file an edit operation rewrites ("" when absent); refuses what it cannot edit."""
    require_regular_file(current)
    if not current.exists:
        return ""
    if current.size is not None and current.size > cap:
        raise TaskFailed(f"{current.path} is {current.size} bytes, more than the {cap} an edit reads")
    text = current.text()
    if text is None:
        raise TaskFailed(f"{current.path} is not UTF-8 text (or could not be read)")
    return text


class FileEditOperation(Operation):
    """An operation that rewrites the text of one file, `args.path` (ini, lineinfile, json_merge,
    apt_components): its probe reads the file's state and content."""

    def probe(self, args: Any) -> Probe[FileState]:
        return file_state_probe(args.path)

"""`file` and `template`: a file's content, owner, group and mode, or its absence.

`template` is `file` whose content comes from a Jinja template: its `prepare` renders `src` into
`content` before probing and planning (when both are given, the rendered `src` wins). Content given
as a Secret, or with `secret: true`, never shows in a diff; other diffs have secret values masked.
A new file defaults to 0644, or 0600 when it is secret or holds any secret value.
Without `content`, `state: present` only makes sure the file exists (empty if new) with the attributes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar, Literal

from provision.errors import InputError
from provision.ops.base import OpArgs, Operation, Plan, Probe, register
from provision.ops.fields import AbsolutePath, FileMode
from provision.ops.filestate import (
    FileState,
    attribute_changes,
    attributes_plan,
    file_state_probe,
    require_regular_file,
    sha256_hex,
    write_file_command,
)
from provision.ops.needs import PREFERENCES_DIR, AptPreferences, Need
from provision.ops.scripting import text_diff
from provision.secrets import REDACTOR, Secret
from provision.shell import Command, quote


class FileArgs(OpArgs):
    dest: AbsolutePath
    content: str | Secret | None = None
    owner: str | None = None
    group: str | None = None
    mode: FileMode = None
    state: Literal["present", "absent"] = "present"
    secret: bool = False
    #: a program that checks the new content before it replaces the file (`[haproxy, -c, -f]`): run with
    #: the temporary file's path appended; when it fails, the file is left as it was and the task fails
    validate_with: list[str] | None = None

    @property
    def is_secret(self) -> bool:
        return self.secret or isinstance(self.content, Secret)

    def content_bytes(self) -> bytes | None:
        if self.content is None:
            return None
        value = self.content.reveal() if isinstance(self.content, Secret) else self.content
        return value.encode()


class TemplateArgs(FileArgs):
    src: str


def content_diff(current: FileState, new: bytes | None, secret: bool) -> str:
    """The diff to show for a content change: unified text, or a one-line note when it cannot be shown."""
    if secret:
        return f"{current.path}: content changed (secret)\n"
    old_text = current.text() if current.exists else None
    if current.exists and old_text is None:
        new_size = len(new) if new is not None else 0
        return f"{current.path}: content changed ({current.size} -> {new_size} bytes, not shown)\n"
    try:
        new_text = new.decode() if new is not None else None
    except UnicodeDecodeError:
        return f"{current.path}: binary content changed\n"
    return text_diff(current.path, old_text, new_text)


@register
class FileOperation(Operation):
    """Converged when the content (by sha256), owner, group and mode match."""

    name = "file"
    Args: ClassVar[type[FileArgs]] = FileArgs

    def probe(self, args: FileArgs) -> Probe[FileState]:
        data = args.content_bytes()
        return file_state_probe(
            args.dest,
            want_content=not args.is_secret,
            unless_sha256=sha256_hex(data) if data is not None and not args.is_secret else None,
        )

    def plan(self, args: FileArgs, facts: Any, current: FileState) -> Plan:
        if args.state == "absent":
            return self._plan_absent(args, current)
        require_regular_file(current)
        data = args.content_bytes()
        if not current.exists:
            return Plan(
                changed=True,
                steps=[self._write(args, current, data or b"")],
                summary=f"create {current.path}",
                diff=content_diff(current, data or b"", args.is_secret),
            )
        attributes = attribute_changes(current, args.owner, args.group, args.mode)
        if data is not None and sha256_hex(data) != current.sha256:
            return Plan(
                changed=True,
                steps=[self._write(args, current, data)],
                summary=", ".join([f"update {current.path}", *attributes]),
                diff=content_diff(current, data, args.is_secret),
            )
        return attributes_plan(current, args.owner, args.group, args.mode, ok=f"{current.path} is up to date")

    def _write(self, args: FileArgs, current: FileState, data: bytes) -> Command:
        # a rendered template holding a secret value gets the secret default mode (0600) too
        holds_secret = args.is_secret or REDACTOR(data.decode(errors="replace")) != data.decode(errors="replace")
        return write_file_command(current, data, owner=args.owner, group=args.group, mode=args.mode,
                                  secret=holds_secret, validate=args.validate_with)

    def _plan_absent(self, args: FileArgs, current: FileState) -> Plan:
        if not current.exists:
            return Plan.ok(f"{args.dest} is absent")
        require_regular_file(current)
        return Plan(
            changed=True,
            steps=[Command(script=f"rm -f -- {quote(args.dest)}", description=f"remove {args.dest}")],
            summary=f"remove {args.dest}",
            diff=content_diff(current, None, args.is_secret),
        )


@register
class TemplateOperation(FileOperation):
    """`file` whose content the runner rendered from `src`; planning without that content is a bug."""

    name = "template"
    Args = TemplateArgs
    offline_arguments = ("src", "dest")

    def offline_needs(self, args: dict[str, Any], render_file: Callable[[str], str]) -> list[Need]:
        """An apt preferences file (the driver's version pin) decides what the bundle's packages are."""
        if not str(args.get("dest", "")).startswith(PREFERENCES_DIR):
            return []
        return [AptPreferences(str(args["dest"]), render_file(str(args["src"])))]

    def template_files(self, args: dict[str, Any]) -> list[Any]:
        return [args["src"]] if "src" in args else []

    def prepare(self, rendered: dict[str, Any], render_file: Callable[[str], str]) -> dict[str, Any]:
        """`src` rendered into `content`, before the probe (the content decides the plan)."""
        return {**rendered, "content": render_file(rendered["src"])} if "src" in rendered else rendered

    def plan(self, args: TemplateArgs, facts: Any, current: FileState) -> Plan:  # type: ignore[override]
        if args.content is None and args.state == "present":
            raise InputError(f"template {args.src!r} was not rendered before planning", key="src")
        return super().plan(args, facts, current)

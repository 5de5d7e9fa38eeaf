"""`docker_load`: images from `docker save` archives loaded into the host's docker, each matched by
its image id (the sha256 of its config, the same on every machine that has those bytes).

Converged is each reference present with the id the bundle recorded (one `docker image inspect`).
A load that gives another id (a different image behind the tag) fails naming both ids. `docker load`
keeps the tags the archive was saved with; docker 20.10's store does not keep repository digests
across save/load, which is why the id is what is matched. A load shows the bytes the docker CLI has
read of the archive, and the rate (docker_load.sh: `docker load` draws its bars only on a terminal).
"""

from __future__ import annotations

import posixpath
import time
from dataclasses import dataclass
from functools import partial
from importlib import resources
from typing import Any

from pydantic import BaseModel

from provision.errors import TaskFailed
from provision.ops.base import Action, ApplyContext, ApplyResult, OpArgs, Operation, Plan, Probe, Step, register
from provision.ops.fields import AbsolutePath
from provision.ops.scripting import probe_block
from provision.ops.streaming import ProgressThrottle, run_streaming
from provision.ops.transfer_rate import MIB, TransferRate
from provision.shell import Command, parse_records, quote


class BundledImage(BaseModel):
    reference: str
    file: str
    id: str


class DockerLoadArgs(OpArgs):
    dir: AbsolutePath  # the bundle folder on the host
    images: list[BundledImage]


def inspect_lines(images: list[BundledImage]) -> str:
    return "\n".join(f'echo "id=$(docker image inspect --format "{{{{.Id}}}}" -- {quote(i.reference)} '
                     f'2>/dev/null)"' for i in images)


def parse_ids(count: int, output: str) -> list[str]:
    """The image id of each reference, in order ("" where absent); TaskFailed unless there are `count`."""
    found = parse_records(output, "id")
    if len(found) != count:
        raise TaskFailed(f"the image probe printed nothing usable: {output.strip()[:200]!r}")
    return found


@dataclass(frozen=True)
class LoadArchive(Action):
    """Run `load` (docker_load.sh on one archive of the bundle), its output read into progress."""

    load: Command


@dataclass(frozen=True)
class CheckImages(Action):
    """After the loads: run `check` and fail unless each of `images` has the bundle's id."""

    check: Command
    images: tuple[BundledImage, ...]


@register
class DockerLoadOperation(Operation):
    name = "docker_load"
    Args = DockerLoadArgs

    def probe(self, args: DockerLoadArgs) -> Probe[list[str]]:
        return Probe(probe_block(inspect_lines(args.images)), partial(parse_ids, len(args.images)))

    def plan(self, args: DockerLoadArgs, facts: Any, found: list[str]) -> Plan:
        loads = [image for image, have in zip(args.images, found, strict=True) if have != image.id]
        if not loads:
            return Plan.ok(", ".join(f"{i.reference} present ({i.id[:19]})" for i in args.images))
        script = resources.files("provision.ops").joinpath("docker_load.sh").read_text(encoding="utf-8")
        commands = [Command(script=script, env={"ARCHIVE": posixpath.join(args.dir, i.file)},
                            description=f"docker load {i.file}", timeout=3600) for i in loads]
        check = Command(script=inspect_lines(args.images), description="the image ids after the load")
        steps: list[Step] = [LoadArchive(command.description, load=command) for command in commands]
        steps.append(CheckImages(check.description, check=check, images=tuple(args.images)))
        return Plan(changed=True, steps=steps,
                    summary="load " + ", ".join(f"{i.reference} ({i.id[:19]}) from the bundle" for i in loads))

    def apply(self, ctx: ApplyContext, plan: Plan) -> ApplyResult:
        for step in plan.steps:  # the loads, then the image ids after them
            if isinstance(step, LoadArchive):
                load_with_progress(ctx, step.load)
            elif isinstance(step, CheckImages):
                found = parse_records(ctx.conn.run_command(step.check).stdout, "id")
                for image, have in zip(step.images, found, strict=False):
                    if have != image.id:
                        raise TaskFailed(f"after docker load, {image.reference} is {have or 'absent'}, not the "
                                         f"bundle's {image.id}")
            else:
                raise TypeError(f"docker_load cannot apply {step!r}")
        return ApplyResult(changed=True)


class LoadProgress:
    """Reads docker_load.sh's "size=BYTES" and "loaded=BYTES" lines."""

    def __init__(self) -> None:
        self.size: int | None = None
        self.loaded = 0

    def feed(self, line: str) -> bool:
        """True when the line moved the progress."""
        key, _, value = line.strip().partition("=")
        if key not in ("size", "loaded") or not value.isdigit():
            return False
        if key == "size":
            self.size = int(value)
        else:
            self.loaded = max(self.loaded, int(value))
        return True

    def describe(self, what: str, rate: str) -> tuple[str, float | None, float | None]:
        total = f"/{self.size / MIB:.1f}" if self.size else ""
        return f"{what}: {self.loaded / MIB:.1f}{total} MiB{rate}", self.loaded, self.size


def load_with_progress(ctx: ApplyContext, command: Command) -> None:
    progress = LoadProgress()
    throttle = ProgressThrottle(ctx.progress, every=1.0)
    rate = TransferRate(time.monotonic)

    def on_line(line: str) -> None:
        if progress.feed(line):
            throttle(*progress.describe(command.description, rate.text(progress.loaded)))

    loaded = run_streaming(ctx.conn, command, on_line, check=False)
    if loaded.rc != 0:
        raise TaskFailed(f"{command.description} failed (exit {loaded.rc}): "
                         f"{(loaded.stderr.strip() or loaded.stdout.strip())[-400:]}")

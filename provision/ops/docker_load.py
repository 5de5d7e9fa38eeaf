"""`docker_load`: images from `docker save` archives loaded into the host's docker, each matched by
its image id (the sha256 of its config, the same on every machine that has those bytes).

Converged is each reference present with the id the bundle recorded (one `docker image inspect`).
A load that gives another id (a different image behind the tag) fails naming both ids. `docker load`
keeps the tags the archive was saved with; docker 20.10's store does not keep repository digests
across save/load, which is why the id is what is matched.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from functools import partial
from typing import Any

from pydantic import BaseModel

from provision.errors import TaskFailed
from provision.ops.base import ApplyContext, ApplyResult, OpArgs, Operation, Plan, Probe, register
from provision.ops.fields import AbsolutePath
from provision.ops.scripting import probe_block
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


@dataclass
class LoadPlan(Plan):
    args: DockerLoadArgs | None = None


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
        commands = [Command(script=f"docker load --quiet --input {quote(posixpath.join(args.dir, i.file))}",
                            description=f"docker load {i.file}", timeout=3600) for i in loads]
        check = Command(script=inspect_lines(args.images), description="the image ids after the load")
        return LoadPlan(changed=True, steps=[*commands, check], args=args,
                            summary="load " + ", ".join(f"{i.reference} ({i.id[:19]}) from the bundle" for i in loads))

    def apply(self, ctx: ApplyContext, plan: Plan) -> ApplyResult:
        assert isinstance(plan, LoadPlan) and plan.args is not None
        args = plan.args
        found = parse_records(super().apply(ctx, plan).stdout, "id")  # the last step: the ids
        for image, have in zip(args.images, found, strict=False):
            if have != image.id:
                raise TaskFailed(f"after docker load, {image.reference} is {have or 'absent'}, not the bundle's "
                                 f"{image.id}")
        return ApplyResult(changed=True)

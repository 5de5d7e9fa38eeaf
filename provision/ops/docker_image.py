"""`docker_image`: an image present in the host's docker, pulled with progress, its digest known.

Converged means the image is present: a tag is not pulled again (so a run costs no registry round
trip) unless `force: true`; a reference pinned by digest (`repo@sha256:...`) is converged when that
digest is present. Pulling streams `docker pull`'s lines into the live view (layers done of layers
seen). The registered result has `digest` (the repository digest, `sha256:...`), `id` (the image id)
and `pinned`: the reference by digest (`repo@sha256:...`, or the image id for an image that never
came from a registry), which is what a service should run, so that a moved tag changes nothing
until it is pulled on purpose. In check mode an absent image has empty `digest` and `pinned`.

The pull (docker_pull.sh) goes through the Engine API where it can, for bytes and rate per pull
(the sum of every layer's progressDetail); otherwise `docker pull`, whose lines give layers done.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from pydantic import field_validator

from provision.errors import TaskFailed
from provision.ops.base import Action, ApplyContext, ApplyResult, OpArgs, Operation, Plan, Probe, register
from provision.ops.needs import Image, Need
from provision.ops.scripting import probe_block
from provision.ops.streaming import ProgressThrottle, run_streaming
from provision.ops.transfer_rate import TransferRate
from provision.shell import Command, parse_fields, quote

REFERENCE = re.compile(r"^[a-z0-9][a-z0-9._:/@-]*$", re.IGNORECASE)
LAYER_LINE = re.compile(r"^([0-9a-f]{12}): (.+)$")


class DockerImageArgs(OpArgs):
    image: str
    force: bool = False

    @field_validator("image")
    @classmethod
    def _reference(cls, value: str) -> str:
        return require_reference(value)


def require_reference(value: str) -> str:
    """An image reference (never a leading `-`, which docker would read as an option)."""
    if not REFERENCE.match(value) or value.endswith((":", "/", "@")):
        raise ValueError(f"{value!r} is not an image reference like repo/name:tag")
    return value


def split_reference(image: str) -> tuple[str, str | None, str | None]:
    """`registry:5000/repo/name:tag@sha256:x` -> (`registry:5000/repo/name`, `tag`, `sha256:x`)."""
    name, _, digest = image.partition("@")
    tag = None
    slash, colon = name.rfind("/"), name.rfind(":")
    if colon > slash:
        name, tag = name[:colon], name[colon + 1:]
    return name, tag, digest or None


def normalize_repository(name: str) -> str:
    """Docker Hub names as docker shows them in RepoDigests: no `docker.io/`, no `library/`."""
    for prefix in ("docker.io/", "index.docker.io/"):
        if name.startswith(prefix):
            name = name[len(prefix):]
    return name.removeprefix("library/")


def pick_digest(image: str, repo_digests: list[str]) -> str:
    """The digest of `image`'s repository among `repo@sha256:...` entries ("" when none)."""
    repository = normalize_repository(split_reference(image)[0])
    for entry in repo_digests:
        name, _, digest = entry.partition("@")
        if normalize_repository(name) == repository and digest:
            return digest
    return ""


def inspect_script(image: str) -> str:
    template = '{{.Id}} {{range .RepoDigests}}{{.}},{{end}}'
    return f"""if ! command -v docker >/dev/null 2>&1; then echo docker=missing
elif out=$(docker image inspect --format {quote(template)} -- {quote(image)} 2>/dev/null)
then echo present=1; echo "id=${{out%% *}}"; echo "repo_digests=${{out#* }}"
else echo present=0
fi"""


def parse_inspect(output: str) -> dict[str, str]:
    """inspect_script's lines; TaskFailed when it said neither `present` nor that docker is missing."""
    fields = parse_fields(output)
    if fields.get("docker") != "missing" and "present" not in fields:
        raise TaskFailed(f"the image probe printed nothing usable: {output.strip()[:200]!r}")
    return fields


def image_result(image: str, fields: dict[str, str]) -> dict[str, str]:
    digests = [d for d in fields.get("repo_digests", "").split(",") if d]
    digest = pick_digest(image, digests)
    image_id = fields.get("id", "")
    pinned = f"{split_reference(image)[0]}@{digest}" if digest else image_id
    return {"image": image, "digest": digest, "id": image_id, "pinned": pinned}


@dataclass
class PullProgress:
    """Reads a pull's output: `docker pull` lines (layers seen and done) or the Engine API's JSON
    lines (also bytes per layer: `layer_bytes` id -> (current, total)); `error` is the API's."""

    seen: set[str] = field(default_factory=set)
    done: set[str] = field(default_factory=set)
    layer_bytes: dict[str, tuple[int, int]] = field(default_factory=dict)
    error: str = ""

    @property
    def bytes(self) -> tuple[int, int]:
        """(bytes downloaded, bytes to download) over the layers whose size is known."""
        return sum(c for c, _ in self.layer_bytes.values()), sum(t for _, t in self.layer_bytes.values())

    def feed(self, line: str) -> bool:
        """Take one line; True when the counts changed."""
        if line.startswith("{"):
            return self.feed_event(line)
        match = LAYER_LINE.match(line.strip())
        if not match:
            return False
        layer, status = match.groups()
        before = (len(self.seen), len(self.done))
        self.seen.add(layer)
        if status.startswith(("Pull complete", "Already exists")):
            self.done.add(layer)
        return before != (len(self.seen), len(self.done))

    def feed_event(self, line: str) -> bool:
        try:
            event = json.loads(line)
        except ValueError:
            return False
        return self.take(event)

    def take(self, event: dict[str, Any]) -> bool:
        """One event of the API's pull stream (also what the docker SDK's pull yields)."""
        if "error" in event or "message" in event:
            self.error = str(event.get("error") or event.get("message"))
            return False
        layer, status = str(event.get("id", "")), str(event.get("status", ""))
        detail = event.get("progressDetail") or {}
        before = (len(self.seen), len(self.done), self.bytes)
        if status in ("Pulling fs layer", "Waiting", "Downloading", "Already exists"):
            self.seen.add(layer)
        if status == "Downloading" and detail.get("total"):
            self.layer_bytes[layer] = (int(detail.get("current", 0)), int(detail["total"]))
        elif status in ("Download complete", "Pull complete", "Already exists"):
            if layer in self.layer_bytes:
                self.layer_bytes[layer] = (self.layer_bytes[layer][1], self.layer_bytes[layer][1])
            if status != "Download complete":
                self.done.add(layer)
        return before != (len(self.seen), len(self.done), self.bytes)

    def describe(self, image: str, rate: str) -> tuple[str, float, float]:
        """The live view's line and its (completed, total): bytes when known, else layers."""
        moved, total = self.bytes
        if total:
            return (f"pulling {image}: {moved / MIB:.1f} of {total / MIB:.1f} MiB{rate}, "
                    f"{len(self.done)} of {len(self.seen)} layers", moved, total)
        return f"pulling {image}: {len(self.done)} of {len(self.seen)} layers", len(self.done), len(self.seen)


MIB = 1024 * 1024


def pull_command(image: str) -> Command:
    name, tag, digest = split_reference(image)
    script = resources.files("provision.ops").joinpath("docker_pull.sh").read_text(encoding="utf-8")
    return Command(script=script, description=f"docker pull {image}", timeout=None,
                   env={"IMAGE": image, "FROM_IMAGE": name, "TAG": digest or tag or "latest"})


@dataclass(frozen=True)
class PullImage(Action):
    """Run `pull` (docker_pull.sh for `image`), its output read line by line into layer progress."""

    image: str
    pull: Command


@register
class DockerImageOperation(Operation):
    name = "docker_image"
    Args = DockerImageArgs
    offline_arguments = ("image",)

    def offline_needs(self, args: dict[str, Any], render_file: Callable[[str], str]) -> list[Need]:
        return [Image(str(args["image"]))] if args.get("image") else []

    def probe(self, args: DockerImageArgs) -> Probe[dict[str, str]]:
        return Probe(probe_block(inspect_script(args.image)), parse_inspect)

    def plan(self, args: DockerImageArgs, facts: Any, fields: dict[str, str]) -> Plan:
        if fields.get("present") == "1" and not args.force:
            result = image_result(args.image, fields)
            return Plan.ok(f"{args.image} present ({result['digest'] or result['id']})", **result)
        why = "forced" if fields.get("present") == "1" else "not present"
        inspect = Command(script=inspect_script(args.image), description=f"docker image inspect {args.image}")
        pull = pull_command(args.image)
        return Plan(changed=True, steps=[PullImage(pull.description, image=args.image, pull=pull), inspect],
                    summary=f"pull {args.image} ({why})",
                    result={"image": args.image, "digest": "", "id": "", "pinned": ""})

    def apply(self, ctx: ApplyContext, plan: Plan) -> ApplyResult:
        step, inspect = plan.steps
        if not (isinstance(step, PullImage) and isinstance(inspect, Command)):
            raise TypeError(f"expected a PullImage and the inspect command, got {plan.steps!r}")
        image = step.image
        progress = PullProgress()
        throttle = ProgressThrottle(ctx.progress, every=1.0)
        rate = TransferRate(time.monotonic)

        def on_line(line: str) -> None:
            if progress.feed(line):
                throttle(*progress.describe(image, rate.text(progress.bytes[0]) if progress.bytes[1] else ""))

        pulled = run_streaming(ctx.conn, step.pull, on_line, check=False)
        if pulled.rc != 0:
            reason = progress.error or (pulled.stderr.strip() or pulled.stdout.strip())[-400:]
            raise TaskFailed(f"docker pull {image} failed (exit {pulled.rc}): {reason}")
        inspected = ctx.conn.run_command(inspect)
        fields = parse_fields(inspected.stdout)
        if fields.get("present") != "1":
            raise TaskFailed(f"{image} was pulled but docker does not show it: {inspected.stdout[-300:]}")
        result = image_result(image, fields)
        return ApplyResult(changed=True, summary=f"pulled {image} ({result['digest'] or result['id']})",
                           result=result)

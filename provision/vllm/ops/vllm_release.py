"""`vllm_release`: the vLLM container as a systemd service, deployed as a checked, reversible release.

From the model profile's data (image pinned by digest, model, flags mapping, weights commit, the
API key) it renders the unit (`docker run --gpus all --ipc=host ...`, see vllm/unit.py), the env
file (0600, plain settings) and the API key file (0600, mounted read-only into the container; the
Hugging Face token never enters it: the weights are in the cache and vLLM runs offline), and
compares that release with the host's release record
and live files. Converged (same release, files untouched, service running and enabled): nothing
happens, no restart. Otherwise apply stops the service, swaps the files in atomically, starts it,
waits for readiness (stopping early on vLLM's fatal log lines) and runs the text and vision smoke
checks; an upgrade that fails is rolled back to the previous release, which is started and checked
again, and the host fails with the reason (service/release.py). The registered result has
`smoked: true` when this run checked the service (so the smoke role need not check it again).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from pydantic import Field, field_validator, model_validator

from provision.ops.base import Action, ApplyContext, ApplyResult, Operation, Plan, Probe, only_step, register
from provision.ops.docker_image import require_reference
from provision.ops.scripting import probe_block, text_diff
from provision.secrets import Secret
from provision.shell import Command
from provision.vllm.argv import FlagError, serve_arguments
from provision.vllm.checks import host_runner
from provision.vllm.guard import UpgradeGuard
from provision.vllm.ops.vllm_service import VllmServiceArgs, verify_on
from provision.vllm.release import (
    Deployer,
    LiveState,
    Release,
    differences,
    parse_live_state,
    record_script,
    sha256_text,
    state_probe,
)
from provision.vllm.unit import ContainerUnit, render_env_file, render_unit


class VllmReleaseArgs(VllmServiceArgs):
    """The service, and what its release is made of: every value from the vllm role (tasks.yaml), no
    default here (a missing one is an input error naming it)."""

    image: str
    image_pinned: str
    model: str
    flags: dict[str, Any]
    weights: dict[str, str]
    bind_address: str
    volumes: list[str]
    run_options: list[str]
    env: dict[str, str]
    api_key: Secret
    command: list[str]  # the image's entrypoint, run after the secrets are read
    docker: str
    restart_sec: int = Field(ge=0)
    start_limit_interval: int = Field(ge=0)
    start_limit_burst: int = Field(ge=1)
    stop_timeout: int = Field(ge=1)

    @field_validator("image", "image_pinned")
    @classmethod
    def _image(cls, value: str) -> str:
        """An image reference (never read as a `docker run` option: the unit's argv has no `--`)."""
        return require_reference(value) if value else value

    @field_validator("api_key", mode="before")
    @classmethod
    def _secret(cls, value: object) -> object:
        """The key becomes a Secret: registered with the redactor as soon as it is read."""
        return value if isinstance(value, Secret) else Secret("" if value is None else str(value))

    @field_validator("env", mode="before")
    @classmethod
    def _plain(cls, value: object) -> object:
        if isinstance(value, dict):
            return {str(k): "" if v is None else str(v) for k, v in value.items()}
        return value

    @field_validator("flags")
    @classmethod
    def _flags(cls, value: dict[str, Any]) -> dict[str, Any]:
        try:
            serve_arguments("model", value)
        except FlagError as error:
            raise ValueError(str(error)) from error
        return value

    @model_validator(mode="after")
    def _served_name(self) -> VllmReleaseArgs:
        named = self.flags.get("served-model-name", self.flags.get("served_model_name"))
        names = named if isinstance(named, list) else [named] if named else [self.model]
        if self.service.served_name not in [str(n) for n in names]:
            raise ValueError(f"served_name {self.service.served_name!r} is not among the names vLLM serves: {names}")
        return self

    @property
    def container_port(self) -> int:
        """The port vLLM listens on in the container: its `--port` flag, else vLLM's own default."""
        return int(self.flags.get("port", 8000))

    def unit(self) -> ContainerUnit:
        service = self.service
        bind = f"{self.bind_address}:" if self.bind_address else ""
        return ContainerUnit(
            name=service.name, description=f"vLLM serving {service.served_name} ({self.model})",
            image=self.image_pinned or self.image, arguments=serve_arguments(self.model, self.flags),
            run_options=list(self.run_options), ports=[f"{bind}{service.port}:{self.container_port}"],
            volumes=list(self.volumes),
            env_file=service.env_file, docker=self.docker, command=list(self.command),
            secret_files={"VLLM_API_KEY": service.api_key_file} if self.api_key.reveal() else {},
            restart_sec=self.restart_sec,
            start_limit_interval_s=self.start_limit_interval, start_limit_burst=self.start_limit_burst,
            stop_timeout_s=self.stop_timeout, start_timeout_s=int(service.ready_timeout),
        )

    def release(self) -> Release:
        unit = self.unit()
        return Release(image=self.image, pinned_image=self.image_pinned, weights=dict(self.weights),
                       arguments=unit.arguments, unit_text=render_unit(unit),
                       env_text=render_env_file(self.env), key_text=self.api_key.reveal())


@dataclass(frozen=True)
class DeployRelease(Action):
    """Swap the release in over what the host runs now, check it, roll an upgrade back on failure."""

    args: VllmReleaseArgs
    release: Release
    live: LiveState


@register
class VllmReleaseOperation(Operation):
    name = "vllm_release"
    Args = VllmReleaseArgs
    interrupts_service = True

    def probe(self, args: VllmReleaseArgs) -> Probe[LiveState]:
        return Probe(probe_block(state_probe(args.layout())), parse_live_state)

    def plan(self, args: VllmReleaseArgs, facts: Any, live: LiveState) -> Plan:
        release = args.release()
        reasons = differences(release, live)
        result = {"release": release.id, "smoked": False}
        note = live.record.note
        if not reasons and note:  # the last run was cut off and the host's guard acted: say so, once
            seen = replace(live.record, note=None)
            write = Command(script=record_script(args.layout(), seen.kept_ids()), data=seen.text().encode(),
                            description="record that the guard's note was seen")
            return Plan(changed=True, summary=f"release {release.id} serving; {note}", result=result, steps=[write])
        if not reasons:
            return Plan.ok(f"release {release.id} serving ({args.image})", **result)
        if note:
            reasons.append(note)
        pending = "" if args.image_pinned else f" (once {args.image} is pulled)"
        diff = text_diff(args.layout().unit_path, live.unit_text, release.unit_text)
        if live.env_sha256 != release.entry()["env_sha256"]:
            diff += f"{args.service.env_file}: content changed\n"
        if release.key_text and live.key_sha256 != sha256_text(release.key_text):
            diff += f"{args.service.api_key_file}: API key changed (secret)\n"
        return Plan(changed=True, summary=f"deploy release {release.id}{pending}: {'; '.join(reasons)}",
                    diff=diff, result=result,
                    steps=[DeployRelease(f"deploy release {release.id}: stop {args.service.name}, swap its files in, "
                                         "start it, wait for readiness, run the smoke checks; an upgrade that fails is "
                                         "rolled back", args=args, release=release, live=live)])

    def apply(self, ctx: ApplyContext, plan: Plan) -> ApplyResult:
        if all(isinstance(step, Command) for step in plan.steps):  # only the note's acknowledgement
            return super().apply(ctx, plan)
        step = only_step(plan, DeployRelease)
        args = step.args
        service = args.service
        guard = UpgradeGuard(args.layout(), args.endpoint(), service.ready_timeout, service.smoke_timeout,
                             service.smoke_vision)
        deployer = Deployer(host_runner(ctx.conn, f"deploy {service.name}"), args.layout(), verify_on(ctx, args), guard)
        checks = deployer.deploy(step.release, step.live)
        return ApplyResult(changed=True, summary=f"{plan.summary}; {checks['summary']}",
                           result={**plan.result, "smoked": True, **checks})

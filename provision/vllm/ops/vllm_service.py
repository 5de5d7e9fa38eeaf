"""The vLLM service as every vLLM operation takes it: one `service:` mapping (`ServiceSpec`), where
the service lives on the host and how it is checked. The role's `vllm_service` variable
(roles/vllm/defaults.yaml) is the one source of its values: the type has no defaults of its own, so a
missing value is an input error naming the key (`service.ready_timeout: Field required`), never a
second, silently different value. `render` and `status` validate the release task's mapping with this
same type (provision/cli/serving.py: `host_services`). See provision/vllm/ for the behaviour.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from provision.ops.base import ApplyContext, OpArgs
from provision.ops.fields import AbsolutePath
from provision.ops.streaming import ProgressThrottle
from provision.vllm.checks import CheckSettings, verifier
from provision.vllm.endpoint import Endpoint
from provision.vllm.readiness import StartMark
from provision.vllm.release import Layout


class ServiceSpec(OpArgs):
    """One vLLM service: its unit and container name, port, files, and check settings."""

    name: str = Field(pattern=r"^[a-zA-Z0-9][a-zA-Z0-9_.-]*$")
    port: int = Field(ge=1, le=65535)
    served_name: str
    env_file: AbsolutePath
    api_key_file: AbsolutePath
    state_dir: AbsolutePath
    ready_timeout: float = Field(gt=0)
    smoke_vision: bool
    smoke_timeout: float = Field(gt=0)

    def endpoint(self) -> Endpoint:
        return Endpoint(name=self.name, port=self.port, key_file=self.api_key_file, served_name=self.served_name)

    def layout(self) -> Layout:
        return Layout(name=self.name, env_file=self.env_file, state_dir=self.state_dir, key_file=self.api_key_file)

    def check_settings(self) -> CheckSettings:
        return CheckSettings(ready_timeout=self.ready_timeout, vision=self.smoke_vision,
                             smoke_timeout=self.smoke_timeout)


class VllmServiceArgs(OpArgs):
    """The arguments of `vllm_smoke` and `vllm_rollback`, the base of `vllm_release`'s: the service."""

    service: ServiceSpec

    def endpoint(self) -> Endpoint:
        return self.service.endpoint()

    def layout(self) -> Layout:
        return self.service.layout()


def verify_on(ctx: ApplyContext, args: VllmServiceArgs) -> Any:
    """`verify(mark)` for this host: readiness (progress in the live view), then the smoke checks."""
    return verifier(ctx.conn, args.endpoint(), args.service.check_settings(), ProgressThrottle(ctx.progress, every=5.0))


def verify_running(ctx: ApplyContext, args: VllmServiceArgs) -> dict[str, Any]:
    """Check a service that is already running (its journal since its current start)."""
    result: dict[str, Any] = verify_on(ctx, args)(StartMark())
    return result

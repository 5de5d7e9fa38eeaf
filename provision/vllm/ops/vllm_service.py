"""Arguments shared by the vLLM service operations (`vllm_release`, `vllm_smoke`, `vllm_rollback`):
where the service lives on the host and how it is checked. See provision/vllm/ for the behaviour.
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


class VllmServiceArgs(OpArgs):
    name: str = Field(default="vllm", pattern=r"^[a-zA-Z0-9][a-zA-Z0-9_.-]*$")
    port: int = Field(default=8000, ge=1, le=65535)
    served_name: str
    env_file: AbsolutePath = "/etc/provision/vllm/vllm.env"
    api_key_file: AbsolutePath = "/etc/provision/vllm/api-key"
    state_dir: AbsolutePath = "/var/lib/provision/vllm"
    unit_dir: AbsolutePath = "/etc/systemd/system"
    ready_timeout: float = Field(default=1200, gt=0)
    smoke_vision: bool = True
    smoke_timeout: float = Field(default=300, gt=0)

    def endpoint(self) -> Endpoint:
        return Endpoint(name=self.name, port=self.port, key_file=self.api_key_file, served_name=self.served_name)

    def layout(self) -> Layout:
        return Layout(name=self.name, env_file=self.env_file, state_dir=self.state_dir, unit_dir=self.unit_dir,
                      key_file=self.api_key_file)

    def check_settings(self) -> CheckSettings:
        return CheckSettings(ready_timeout=self.ready_timeout, vision=self.smoke_vision,
                             smoke_timeout=self.smoke_timeout)


def verify_on(ctx: ApplyContext, args: VllmServiceArgs) -> Any:
    """`verify(mark)` for this host: readiness (progress in the live view), then the smoke checks."""
    return verifier(ctx.conn, args.endpoint(), args.check_settings(), ProgressThrottle(ctx.progress, every=5.0))


def verify_running(ctx: ApplyContext, args: VllmServiceArgs) -> dict[str, Any]:
    """Check a service that is already running (its journal since its current start)."""
    result: dict[str, Any] = verify_on(ctx, args)(StartMark())
    return result

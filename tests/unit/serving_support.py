"""Helpers for the serving unit tests: the stand-in vLLM server started with the default profile's
own rendered arguments (what `provision render` prints), on a free 127.0.0.1 port."""

from __future__ import annotations

from pathlib import Path

from provision.cli.serving import rendered_arguments
from tests.standins.vllm.launch import StandinProcess, start_standin

REPO_ROOT = Path(__file__).resolve().parents[2]
FAST = {"STANDIN_READY_DELAY": "0", "STANDIN_TOKENS_PER_S": "4000", "STANDIN_REQUIRE_WEIGHTS": "0"}
API_KEY = "sk-unit-test-key-0123456789"


def profile_arguments() -> list[str]:
    """The default profile's `vllm serve` arguments (after `vllm serve`) for inventory/host.yaml."""
    argv = rendered_arguments(REPO_ROOT / "inventory" / "host.yaml", None, [],
                              REPO_ROOT / "playbooks" / "site.yaml")["workhorse"]
    return argv[2:]


def stop(process: StandinProcess) -> None:
    """Stop the stand-in and remove its output file."""
    process.stop()
    process.output_path.unlink(missing_ok=True)


def start_profile_standin(behaviour: str = "ok") -> StandinProcess:
    """The stand-in serving `workhorse` with the profile's flags and API_KEY (from the environment,
    as the unit's env file gives it), ready to answer."""
    process = start_standin(profile_arguments(),
                            env={**FAST, "STANDIN_BEHAVIOUR": behaviour, "VLLM_API_KEY": API_KEY})
    process.wait_ready()
    return process

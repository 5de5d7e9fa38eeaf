"""The systemd unit that runs a container in the foreground, and its docker env file.

One unit shape for a long-running GPU container (REFERENCE.md §5): after and requiring docker,
`Restart=always` with a start-rate limit (a bad flag must not loop forever), a stale container
removed before each start, a bounded stop, and the image pinned by digest so that the unit names
exactly what runs. Pulling happens before (the `docker_image` operation), never in ExecStart.
Secrets never enter the container's configuration (`docker inspect` shows its env, command and
mounts to anyone in the docker group) nor the command line (which `ps` shows): a secret is a
root-only file on the host, mounted read-only at /run/secrets/NAME, and a small `sh` entrypoint
exports it as the variable NAME before it execs the image's own command (vLLM reads its key from
VLLM_API_KEY: `args.api_key or envs.VLLM_API_KEY`, vllm/entrypoints/openai/api_server.py). The env
file (`--env-file`, mode 0600) holds only plain settings.

ExecStart words are quoted for systemd (not for a shell) by `provision.escape.systemd_word`, the
description by `systemd_value` (a line break in a value never starts a new directive).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from provision.escape import systemd_value, systemd_word
from provision.secrets import Secret

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
SECRETS_DIR = "/run/secrets"


@dataclass(frozen=True)
class ContainerUnit:
    """What the unit runs: `docker run --rm --name NAME [options] IMAGE [arguments]`."""

    name: str
    description: str
    image: str
    arguments: list[str]
    # the service's own values, each from its role's variables (no default here: one source)
    command: list[str]  # the image's entrypoint
    docker: str
    restart_sec: int
    start_limit_interval_s: int
    start_limit_burst: int
    start_timeout_s: int
    stop_timeout_s: int
    run_options: list[str] = field(default_factory=list)
    ports: list[str] = field(default_factory=list)
    volumes: list[str] = field(default_factory=list)
    env_file: str | None = None
    secret_files: dict[str, str] = field(default_factory=dict)  # env name -> root-only file on the host

    def run_argv(self) -> list[str]:
        """The ExecStart command as an argument vector."""
        return [word for line in self.exec_lines() for word in line]

    def exec_lines(self) -> list[list[str]]:
        """The ExecStart words grouped as the unit file shows them: an option with its values a line."""
        lines = [[self.docker, "run", "--rm", "--name", self.name]]
        if self.env_file:
            lines.append(["--env-file", self.env_file])
        if self.secret_files:
            lines.append(["--entrypoint", "/bin/sh"])
        lines += group_options(self.run_options)
        lines += [["-p", port] for port in self.ports]
        lines += [["-v", volume] for volume in self.volumes]
        lines += [["-v", f"{path}:{SECRETS_DIR}/{name}:ro"] for name, path in self.secret_files.items()]
        lines.append([self.image])
        if self.secret_files:
            lines.append(["-c", secrets_entrypoint(list(self.secret_files)), "provision-secrets", *self.command])
        positional = [word for word in self.arguments[:1] if not word.startswith("-")]
        if positional:
            lines.append(positional)
        lines += group_options(self.arguments[len(positional):])
        return lines


def secrets_entrypoint(names: list[str]) -> str:
    """The `sh -c` script: each secret file's content into its variable, then exec the command."""
    exports = "; ".join(f'{name}="$(cat {SECRETS_DIR}/{name})"; export {name}' for name in names)
    return f'{exports}; exec "$@"'


def group_options(words: list[str]) -> list[list[str]]:
    """`--a 1 --b --c x y` -> [[--a, 1], [--b], [--c, x, y]] (for display only)."""
    groups: list[list[str]] = []
    for word in words:
        if word.startswith("--") or not groups:
            groups.append([word])
        else:
            groups[-1].append(word)
    return groups


def _exec_text(lines: list[list[str]]) -> str:
    """ExecStart's value: one group of words a line, joined by systemd's line continuation."""
    return " \\\n    ".join(" ".join(systemd_word(word) for word in line) for line in lines)


def render_unit(unit: ContainerUnit) -> str:
    """The unit file's text."""
    container = systemd_word(unit.name)
    docker = systemd_word(unit.docker)
    return f"""# Written by provision: changes here are replaced on the next run.
[Unit]
Description={systemd_value(unit.description)}
After=docker.service network-online.target
Requires=docker.service
Wants=network-online.target
StartLimitIntervalSec={unit.start_limit_interval_s}
StartLimitBurst={unit.start_limit_burst}

[Service]
Type=simple
Restart=always
RestartSec={unit.restart_sec}
TimeoutStartSec={unit.start_timeout_s}
TimeoutStopSec={unit.stop_timeout_s + 30}
ExecStartPre=-{docker} rm -f {container}
ExecStart={_exec_text(unit.exec_lines())}
ExecStop={docker} stop -t {unit.stop_timeout_s} {container}

[Install]
WantedBy=multi-user.target
"""


def render_env_file(env: Mapping[str, str | Secret]) -> str:
    """docker's --env-file text: `NAME=value` lines, taken literally (no quotes, no expansion).
    Empty values are left out; a value with a newline cannot be written and is refused."""
    lines = ["# Written by provision (mode 0600): secrets for the container, read by docker run --env-file."]
    for name, value in env.items():
        if not ENV_NAME.match(name):
            raise ValueError(f"environment variable name {name!r} is not valid")
        text = value.reveal() if isinstance(value, Secret) else str(value)
        if "\n" in text or "\r" in text:
            raise ValueError(f"environment variable {name} has a line break, which an env file cannot hold")
        if text:
            lines.append(f"{name}={text}")
    return "\n".join(lines) + "\n"

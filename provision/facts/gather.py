"""Gather a host's facts: run the probe as one round trip and parse what it printed."""

from __future__ import annotations

from typing import TYPE_CHECKING

from provision.errors import CommandFailed
from provision.facts.model import HostFacts
from provision.facts.probe import parse_probe, probe_script
from provision.secrets import REDACTOR

if TYPE_CHECKING:
    from provision.connection.base import Connection

PROBE_DESCRIPTION = "gather facts (provision/facts/probe.sh)"


def gather_facts(conn: Connection) -> HostFacts:
    """Run the facts probe on `conn` (as root) and return what it found."""
    result = conn.run(probe_script(), sudo=True)
    return facts_from(result.stdout, conn.host_name, result.rc, result.stderr)


def facts_from(stdout: str, host_name: str, exit_code: int = 0, stderr: str = "") -> HostFacts:
    """The facts in the probe's output (run alone, or as a section of the runner's batched probe).

    The probe itself never fails; an empty or unrecognisable output means the shell, sudo or the
    connection did, so that is a CommandFailed naming the host with the tail of stderr.
    """
    try:
        return parse_probe(stdout)
    except ValueError as error:
        raise CommandFailed(
            command=f"{PROBE_DESCRIPTION}: {error}",
            exit_code=exit_code,
            stdout=REDACTOR(stdout),
            stderr=REDACTOR(stderr),
            host=host_name,
        ) from error

"""`-v` shows each remote command and its exit code, `-vv` its output too; secrets as ***."""

from __future__ import annotations

from provision.connection.base import CommandResult
from provision.connection.traced import TracedConnection, headline
from provision.secrets import Secret


class Recorded:
    host_name = "lab1"
    round_trips = 0

    def run(self, script: str, **_: object) -> CommandResult:
        return CommandResult("line one\nthe token is s3cr3t-value-123\n", "warning\n", 3)

    def close(self) -> None: ...


def test_v_shows_the_command_and_its_exit_code_vv_its_output_masked():
    token = Secret("s3cr3t-value-123")
    for verbosity, expect_output in ((1, False), (2, True)):
        said: list[str] = []
        conn = TracedConnection(Recorded(), verbosity, said.append)
        assert conn.run(f"set -e\n# a comment\ncurl -H 'Authorization: {token.reveal()}' x\necho done\n").rc == 3
        assert said[0] == "lab1 | $ curl -H 'Authorization: ***' x  (+3 lines)"
        assert said[1].startswith("lab1 | exit 3 after ")
        assert any("out: the token is ***" in line for line in said) is expect_output
        assert any("err: warning" in line for line in said) is expect_output
        assert not any("s3cr3t" in line for line in said)


def test_the_headline_skips_what_says_nothing():
    assert headline("{\n(\n  set -euo pipefail\n  apt-get install -y curl\n)\n}\n") == \
        "apt-get install -y curl  (+5 lines)"

"""`generated_secret`: made once (0600), shown once, *** every time after; kept across runs."""

from __future__ import annotations

import base64
import stat
from pathlib import Path

from provision.ops import REGISTRY
from provision.secrets import REDACTOR, Secret
from tests.unit.ops_support import LocalTestConnection, context, plan, probe_local


def test_a_kept_secret_is_registered_with_the_redactor_as_soon_as_it_is_read() -> None:
    value = "kept-secret-value-123456"
    result = plan("generated_secret", f"value={base64.b64encode(value.encode()).decode()}\n", path="/etc/key")
    assert not result.changed and isinstance(result.result["value"], Secret)
    assert REDACTOR(f"key is {value}") == "key is ***"


def test_a_missing_secret_is_generated_written_0600_and_shown_once(tmp_path: Path) -> None:
    path = tmp_path / "etc" / "api-key"
    first = plan("generated_secret", probe_local("generated_secret", path=str(path)), path=str(path))
    assert first.changed and first.result["value"] == "(generated when applied)"
    applied = REGISTRY["generated_secret"].apply(context(LocalTestConnection()), first)
    value = applied.result["value"]
    assert path.read_text() == f"{value}\n" and len(value) >= 40
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert value not in applied.summary and f"sudo cat {path}" in applied.summary
    assert first.summary == f"generate a new secret into {path}", "the plan is what check mode showed, unchanged"
    assert applied.reveal == value, "shown once, to a person at a terminal (the live view decides)"
    second = plan("generated_secret", probe_local("generated_secret", path=str(path)), path=str(path))
    assert not second.changed and second.result["value"].reveal() == value
    assert value not in REDACTOR(f"now {value}")


def test_each_host_gets_its_own_secret(tmp_path: Path) -> None:
    values = []
    for host in ("a", "b"):
        path = tmp_path / host
        result = plan("generated_secret", "value=\n", path=str(path))
        values.append(REGISTRY["generated_secret"].apply(context(LocalTestConnection()), result).result["value"])
    assert values[0] != values[1]


def test_a_generated_secret_is_shown_on_a_terminal_only() -> None:
    """Before: the key was in the task's summary, so `provision up ... | tee log` or CI kept it."""
    import io

    from rich.console import Console

    from provision.cli.output import ConsoleReporter
    from provision.runner.results import Status, TaskResult

    secret = "sk-generated-for-the-terminal-0123456789"
    result = TaskResult("key", "vllm", Status.CHANGED, summary="generated a new secret into /k; read it there: "
                        "sudo cat /k", reveal=secret)
    for terminal in (False, True):
        sink = io.StringIO()
        console = Console(file=sink, force_terminal=terminal, width=200)
        reporter = ConsoleReporter(console)
        with reporter:
            reporter.task_finished("h", result)
        shown = secret in sink.getvalue()
        assert shown == terminal, (terminal, sink.getvalue())
        assert "sudo cat /k" in sink.getvalue()

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
    assert first.summary.count(value) == 1 and "shown once" in first.summary
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

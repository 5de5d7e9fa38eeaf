"""`provision facts` prints values as a person reads them, not Python reprs."""

from provision.cli.commands import fact_rows


def test_nested_facts_become_dotted_rows_with_plain_values():
    facts = {"os": {"id": "ubuntu", "version": "24.04"}, "secure_boot": None, "open_module": True,
             "gpus": [{"name": "NVIDIA H200", "memory_mib": 143771}], "kernels": ["6.8.0-45", "6.8.0-49"],
             "apt_sources": []}
    assert fact_rows(facts) == [
        ("os.id", "ubuntu"), ("os.version", "24.04"), ("secure_boot", "-"), ("open_module", "yes"),
        ("gpus.0.name", "NVIDIA H200"), ("gpus.0.memory_mib", "143771"), ("kernels", "6.8.0-45, 6.8.0-49"),
        ("apt_sources", "-"),
    ]


def test_no_row_shows_a_python_repr():
    rows = fact_rows({"a": {"b": [None, False]}, "c": {}})
    assert all(not any(word in value for word in ("None", "True", "False", "{", "[")) for _, value in rows)


def test_secure_boot_on_a_bios_boot_is_shown_as_not_available() -> None:
    rows = dict(fact_rows({"secure_boot": "bios"}))
    assert rows["secure_boot"] == "not available (BIOS boot)"
    firmware_without = dict(fact_rows({"secure_boot": "not_supported"}))["secure_boot"]
    assert firmware_without == "not available (the EFI firmware has none)"
    assert dict(fact_rows({"secure_boot": "disabled"}))["secure_boot"] == "disabled"

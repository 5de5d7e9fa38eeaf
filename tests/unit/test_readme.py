"""The first screen of the README, as a new user reads it: what it shows is what ships."""

from __future__ import annotations

from pathlib import Path


def test_the_readmes_first_inventory_is_the_shipped_file_and_says_to_edit_it_first():
    """Before: the README's snippet differed from inventory/host.yaml, and its first command ran `up`
    on it without saying to put the laptop's address in first."""
    root = Path(__file__).resolve().parents[2]
    readme = (root / "README.md").read_text()
    snippet = readme.split("`inventory/host.yaml` names one machine", 1)[1].split("```yaml\n", 1)[1].split("```", 1)[0]
    assert snippet == (root / "inventory" / "host.yaml").read_text()
    first = readme.split("```bash\n", 1)[1].split("```", 1)[0]
    assert first.index("address") < first.index("provision up inventory/host.yaml"), first

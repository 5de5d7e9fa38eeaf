"""The one rule for "who holds the dpkg lock, and wait for it" (dpkg_lock.sh): the apt operation runs
it before apt-get, and the preflight role's task through the template function `dpkg_lock_script`."""

from __future__ import annotations

from importlib import resources


def dpkg_lock_script() -> str:
    """dpkg_lock.sh's text (kept light: templates import this when an environment is made)."""
    return resources.files("provision.ops").joinpath("dpkg_lock.sh").read_text(encoding="utf-8")

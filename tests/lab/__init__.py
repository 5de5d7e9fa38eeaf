"""The test lab: real Debian hosts (containers booting systemd, with sshd and apt) on one machine.

See docs/lab.md for what a lab host is; `python -m tests.lab up` starts one for a developer,
the `lab` and `lab_hosts` fixtures in tests/conftest.py start one for tests.
"""

from tests.lab.host import Bind, LabHost
from tests.lab.lab import Lab

__all__ = ["Bind", "Lab", "LabHost"]

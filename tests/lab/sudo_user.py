"""A lab host user whose sudo asks for a password, like a fresh Ubuntu laptop's first user.

The user logs in with the lab's key (root's authorized_keys copied) and may run anything through
sudo after typing their password (`ALL=(ALL:ALL) ALL`, no NOPASSWD). The password goes to the host
only as a SHA-512 crypt hash (`openssl passwd -6` here, `usermod -p` there), so no setup command carries it in its argv.
"""

from __future__ import annotations

import shlex
import subprocess

from tests.lab.host import LabHost


def add_sudo_password_user(host: LabHost, name: str, password: str) -> None:
    """Create `name` on `host` with `password`, sudo (password required) and the lab's SSH key."""
    hashed = subprocess.run(["openssl", "passwd", "-6", "-stdin"], input=password, capture_output=True, text=True,
                            check=True).stdout.strip()
    user = shlex.quote(name)
    script = (
        f"useradd --create-home --shell /bin/bash {user} && usermod -p {shlex.quote(hashed)} {user} && "
        f"install -d -m 700 -o {user} -g {user} /home/{name}/.ssh && "
        f"install -m 600 -o {user} -g {user} /root/.ssh/authorized_keys /home/{name}/.ssh/authorized_keys && "
        f"echo {shlex.quote(f'{name} ALL=(ALL:ALL) ALL')} > /etc/sudoers.d/{name} && "
        f"chmod 440 /etc/sudoers.d/{name} && visudo -cq"
    )
    rc, output = host.exec(script)
    if rc != 0:
        raise RuntimeError(f"{host.name}: cannot add the sudo-password user {name}: {output}")

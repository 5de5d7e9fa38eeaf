"""Where the playbooks and roles come from: the user's own, or the ones shipped with the tool.

One rule, used by every command: `--roles-path` if given; else the `roles/` beside a playbook of the
user's (`--playbook my/site.yaml` with `my/../roles`, or ./playbooks with ./roles); else `./roles` of
the working directory; else the shipped roles. The playbook: `--playbook` if given; else
`./playbooks/site.yaml`; else the shipped one. The shipped content is package data of an installed
wheel (`provision/_shipped/`, see pyproject.toml) or, when running from a checkout, the checkout's own
top-level `playbooks/` and `roles/`.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

SITE = Path("playbooks") / "site.yaml"


def shipped_root() -> Path:
    """The folder holding the shipped `playbooks/` and `roles/`."""
    packaged = Path(str(resources.files("provision"))) / "_shipped"
    if (packaged / "roles").is_dir():
        return packaged
    return Path(__file__).resolve().parents[1]


def playbook_path(explicit: Path | None) -> Path:
    if explicit is not None:
        return explicit
    return SITE if SITE.is_file() else shipped_root() / SITE


def roles_path(explicit: Path | None, playbook: Path | None = None) -> Path:
    if explicit is not None:
        return explicit
    shipped = shipped_root()
    if playbook is not None and not playbook.resolve().is_relative_to(shipped.resolve()):
        beside = playbook.resolve().parent.parent / "roles"
        if beside.is_dir():
            return beside
    if Path("roles").is_dir():
        return Path("roles")
    return shipped / "roles"


def describe(explicit_roles: Path | None = None, explicit_playbook: Path | None = None) -> str:
    """Which playbook and roles a command would use (for --version and `provision vars`)."""
    playbook = playbook_path(explicit_playbook)
    return f"playbook {playbook.absolute()}\nroles    {roles_path(explicit_roles, playbook).absolute()}"

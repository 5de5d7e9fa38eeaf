"""What a task needs from an offline bundle, as its operation declares it (`Operation.offline_needs`).

An operation that downloads something (apt packages, an image, the weights) or that changes what apt
resolves (a repository, its key, a component, a preferences file) says so in these types; the bundle
(provision/bundle/needs.py) gathers them per host and never names an operation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

#: where apt reads its preferences (apt_preferences(5)): a file written there pins what apt resolves
PREFERENCES_DIR = "/etc/apt/preferences.d/"


class Packages(NamedTuple):
    """apt packages (`name` or `name=version`, apt's globs kept), installed with or without recommends."""
    names: tuple[str, ...]
    recommends: bool


class AptRepository(NamedTuple):
    """An apt repository the packages are resolved with: its task's rendered arguments."""
    args: dict[str, Any]


class Download(NamedTuple):
    """A file the host downloads (a repository's key or keyring package): the bundle carries it."""
    url: str


class Components(NamedTuple):
    """Components added to the release's own apt entries in the sources file `path` (Debian's contrib)."""
    path: str
    components: tuple[str, ...]


class AptPreferences(NamedTuple):
    """An apt preferences file the run writes (a version pin): its path and text."""
    path: str
    text: str


class Image(NamedTuple):
    """A container image, by reference."""
    reference: str


@dataclass(frozen=True)
class Weights:
    """A Hugging Face repository at a revision."""

    repo: str
    revision: str

    def __str__(self) -> str:
        return f"{self.repo}@{self.revision}"


Need = Packages | AptRepository | Download | Components | AptPreferences | Image | Weights

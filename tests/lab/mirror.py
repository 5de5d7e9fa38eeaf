"""The Debian archive this machine's apt uses, read from its own apt configuration.

The lab hosts use the same archive as the machine (no host name is written into the lab): the image's
apt sources, debootstrap's mirror and the hosts' egress filter all derive from it.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

APT_DIR = Path("/etc/apt")
DEBIAN_CODENAMES = ("bookworm", "trixie")


@dataclass(frozen=True)
class AptSource:
    """One `deb` entry: an archive URI with its suites and components."""

    uri: str
    suites: tuple[str, ...]
    components: tuple[str, ...]


def parse_deb822(text: str) -> list[AptSource]:
    """The `deb` entries of a deb822 `.sources` file (stanzas split by blank lines, `#` comments)."""
    sources = []
    for stanza in text.split("\n\n"):
        fields: dict[str, str] = {}
        for line in stanza.splitlines():
            if line.startswith("#") or ":" not in line or line[0].isspace():
                continue
            key, value = line.split(":", 1)
            fields[key.strip().lower()] = value.strip()
        if "deb" not in fields.get("types", "").split() or fields.get("enabled", "yes") == "no":
            continue
        suites = tuple(fields.get("suites", "").split())
        components = tuple(fields.get("components", "").split())
        sources.extend(AptSource(uri, suites, components) for uri in fields.get("uris", "").split())
    return sources


def parse_one_line(text: str) -> list[AptSource]:
    """The `deb` entries of a one-line-style `sources.list` (`deb [opts] URI SUITE COMPONENTS...`)."""
    sources = []
    for line in text.splitlines():
        words = line.split("#", 1)[0].split()
        if not words or words[0] != "deb":
            continue
        if words[1].startswith("["):
            while not words[1].endswith("]"):
                del words[1]
            del words[1]
        sources.append(AptSource(words[1], (words[2],), tuple(words[3:])))
    return sources


def machine_sources(apt_dir: Path = APT_DIR) -> list[AptSource]:
    """Every `deb` entry this machine's apt uses, in file order, without duplicates."""
    found: list[AptSource] = []
    for path in sorted((apt_dir / "sources.list.d").glob("*.sources")):
        found.extend(parse_deb822(path.read_text()))
    for path in [apt_dir / "sources.list", *sorted((apt_dir / "sources.list.d").glob("*.list"))]:
        if path.is_file():
            found.extend(parse_one_line(path.read_text()))
    return list(dict.fromkeys(found))


def debian_sources(sources: list[AptSource]) -> list[AptSource]:
    """The entries that serve Debian bookworm itself (not third-party repositories)."""
    return [s for s in sources if any(suite.startswith("bookworm") for suite in s.suites)]


def for_suite(sources: list[AptSource], suite: str) -> list[AptSource]:
    """The same archives for another Debian release: `bookworm-updates` becomes `trixie-updates`."""
    return [AptSource(s.uri, tuple(suite + name.removeprefix("bookworm") for name in s.suites), s.components)
            for s in sources]


def main_mirror(sources: list[AptSource]) -> str:
    """The archive debootstrap bootstraps from: the first Debian entry that is not the security one."""
    for source in sources:
        if not any(suite.startswith(DEBIAN_CODENAMES) for suite in source.suites):
            continue
        if not any(suite.endswith("-security") for suite in source.suites):
            return source.uri
    raise RuntimeError(f"no Debian archive found in {APT_DIR}/sources.list.d (needed by the lab)")


def render_deb822(sources: list[AptSource]) -> str:
    """A `debian.sources` file for the lab image: the same archives, signed by Debian's keyring."""
    stanzas = []
    for source in sources:
        stanzas.append(
            "Types: deb\n"
            f"URIs: {source.uri}\n"
            f"Suites: {' '.join(source.suites)}\n"
            f"Components: {' '.join(source.components)}\n"
            "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n"
        )
    return "\n".join(stanzas)


def archive_hosts(sources: list[AptSource]) -> list[str]:
    """The host names of the archives, in order, without duplicates."""
    return [host for host in dict.fromkeys(urlsplit(s.uri).hostname for s in sources) if host]


def archive_addresses(sources: list[AptSource]) -> list[str]:
    """The IPv4 addresses the archives resolve to on this machine (for the hosts' egress filter)."""
    addresses: dict[str, None] = {}
    for host in archive_hosts(sources):
        for info in socket.getaddrinfo(host, None, socket.AF_INET, socket.SOCK_STREAM):
            addresses[str(info[4][0])] = None
    return list(addresses)

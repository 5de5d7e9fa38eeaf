"""`apt_repository`: an APT source in deb822 form with its own signing key, or a keyring package.

Files: /etc/apt/sources.list.d/NAME.sources (deb822: Types, URIs, Suites, Components, Architectures,
Signed-By) and /usr/share/keyrings/NAME.gpg (a binary keyring; ASCII-armored keys are dearmored, by
Python for `key_file` and by awk + base64 on the host for `key_url`, so gpg is not needed there).
The key is given one of three ways:
- `key_file`: the ASCII-armored key itself; converged when the keyring's sha256 matches.
- `key_url`: downloaded with curl (to a `.part` file, checked against `sha256` of the download when
  given). The URL and checksum are recorded in the .sources file's header comment, so changing either
  rewrites the source and downloads the key again; otherwise the key is fetched only when missing.
- `keyring_package_url`: a .deb such as NVIDIA's cuda-keyring that installs its key and source itself;
  converged when that package is installed at the version in the file name (NAME_VERSION_ARCH.deb).
Any change runs `apt-get update` in the same step, so the packages are installable right after.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import posixpath
import re
from collections.abc import Callable
from typing import Any, Literal
from urllib.parse import unquote, urlparse

from pydantic import field_validator, model_validator

from provision.escape import deb822_value, deb822_words
from provision.ops.apt import APT_GET
from provision.ops.apt_update import apt_update_script
from provision.ops.base import OpArgs, Operation, Plan, Probe, Step, register
from provision.ops.fields import DebWordList, Url, UrlList
from provision.ops.needs import AptRepository, Download, Need
from provision.ops.scripting import atomic_write_script, fields_probe, text_diff
from provision.shell import Command, quote

SOURCES_DIR = "/etc/apt/sources.list.d"
KEYRINGS_DIR = "/usr/share/keyrings"
DEB_CACHE = "/var/cache/provision"
# apt ignores files in sources.list.d whose names have other characters
SOURCE_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")
DEB_FILE_NAME = re.compile(r"^([a-z0-9][a-z0-9+.-]*)_([^_]+)_[a-z0-9-]+\.deb$")
ARMOR_BLOCK = re.compile(r"-----BEGIN PGP [A-Z ]+-----\n(.*?)-----END PGP [A-Z ]+-----", re.DOTALL)
DEB_ARCHITECTURES = {"x86_64": "amd64", "aarch64": "arm64", "armv7l": "armhf", "ppc64le": "ppc64el",
                     "i686": "i386", "s390x": "s390x"}
DEARMOR_AWK = r"""awk '
  /^-----BEGIN PGP/ { inblock = 1; header = 1; next }
  /^-----END PGP/ { inblock = 0; next }
  inblock && header { if ($0 ~ /^[ \t]*$/) header = 0; next }
  inblock && /^=/ { next }
  inblock { print }'"""

#: the arguments that name a download (a bundle carries it)
URL_ARGUMENTS = ("key_url", "keyring_package_url")

class AptRepositoryArgs(OpArgs):
    name: str
    uris: UrlList = []
    suites: DebWordList = []
    components: DebWordList = []
    architectures: DebWordList | None = None
    key_url: Url | None = None
    key_file: str | None = None
    keyring_package_url: Url | None = None
    keyring_package: str | None = None
    keyring_package_version: str | None = None
    sha256: str | None = None
    state: Literal["present", "absent"] = "present"

    @field_validator("name")
    @classmethod
    def _file_name(cls, value: str) -> str:
        if not SOURCE_NAME.match(value):
            raise ValueError(f"name {value!r} may only hold letters, digits, '_', '-' and '.' (apt ignores others)")
        return value

    @field_validator("sha256")
    @classmethod
    def _hex(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"[0-9a-fA-F]{64}", value):
            raise ValueError("sha256 must be 64 hex digits")
        return value.lower() if value else value

    @model_validator(mode="after")
    def _consistent(self) -> AptRepositoryArgs:
        given = [key for key in ("key_url", "key_file", "keyring_package_url") if getattr(self, key)]
        if self.state == "present" and len(given) != 1:
            raise ValueError("give exactly one of key_url, key_file or keyring_package_url")
        if self.keyring_package_url:
            if self.uris or self.suites or self.components:
                raise ValueError("keyring_package_url installs its own source: leave out uris/suites/components")
            if self.state == "absent":
                raise ValueError("state: absent is not supported with keyring_package_url (remove the package)")
            self.keyring_package_identity()
        elif self.state == "present":
            if not self.uris or not self.suites:
                raise ValueError("uris and suites are required")
            if any(suite.endswith("/") for suite in self.suites) and self.components:
                raise ValueError("a flat repository (suite ending in '/') takes no components")
        if self.key_file is not None and not ARMOR_BLOCK.search(self.key_file.replace("\r", "")):
            raise ValueError("key_file must be an ASCII-armored key (-----BEGIN PGP PUBLIC KEY BLOCK-----)")
        return self

    def keyring_package_identity(self) -> tuple[str, str]:
        file_name = unquote(posixpath.basename(urlparse(str(self.keyring_package_url)).path))
        match = DEB_FILE_NAME.match(file_name)
        package = self.keyring_package or (match.group(1) if match else None)
        version = self.keyring_package_version or (match.group(2) if match else None)
        if not package or not version:
            raise ValueError(f"cannot read package and version from {file_name!r}: "
                             "give keyring_package and keyring_package_version")
        return package, version

    @property
    def sources_path(self) -> str:
        return f"{SOURCES_DIR}/{self.name}.sources"

    @property
    def keyring_path(self) -> str:
        return f"{KEYRINGS_DIR}/{self.name}.gpg"


def dearmor(text: str) -> bytes:
    """The binary packets of every ASCII-armored block in `text` (what `gpg --dearmor` writes)."""
    packets = b""
    for block in ARMOR_BLOCK.findall(text.replace("\r", "")):
        lines = block.split("\n")
        body_start = next((index + 1 for index, line in enumerate(lines) if not line.strip()), 0)
        body = [line for line in lines[body_start:] if line and not line.startswith("=")]
        try:
            packets += base64.b64decode("".join(body), validate=True)
        except binascii.Error as error:
            raise ValueError(f"the armored key is damaged: {error}") from error
    return packets


def deb_architecture(facts: Any) -> str | None:
    arch = str(getattr(facts, "arch", "") or "")
    return DEB_ARCHITECTURES.get(arch, arch if arch in DEB_ARCHITECTURES.values() else None)


def render_sources(args: AptRepositoryArgs, architectures: list[str]) -> str:
    """The deb822 .sources text; its header records where the key came from."""
    origin = f"# key: {deb822_value(args.key_url)}" + (f" sha256 {args.sha256}" if args.sha256 else "") \
        if args.key_url else None
    lines = ["# Managed by provision: changes here are overwritten.", *([origin] if origin else []),
             "Types: deb", f"URIs: {deb822_words(args.uris)}", f"Suites: {deb822_words(args.suites)}"]
    if args.components:
        lines.append(f"Components: {deb822_words(args.components)}")
    if architectures:
        lines.append(f"Architectures: {deb822_words(architectures)}")
    lines.append(f"Signed-By: {deb822_value(args.keyring_path)}")
    return "\n".join(lines) + "\n"


def download_script(url: str, dest: str, sha256: str | None, *, dearmor_keys: bool, mode: str = "0644") -> str:
    """Download `url` to `dest.part`, verify, (dearmor,) then rename onto `dest`."""
    lines = [
        "(",
        f"umask 022; mkdir -p -- {quote(posixpath.dirname(dest))}",
        f"part={quote(dest + '.part')}",
        """trap 'rm -f -- "$part" "$part.raw"' EXIT""",
        f'curl -fsSL --retry 3 --connect-timeout 30 -o "$part.raw" -- {quote(url)}',
    ]
    if sha256:
        lines.append(f'echo {quote(sha256)}"  $part.raw" | sha256sum -c --quiet -')
    if dearmor_keys:
        lines.append("""if grep -q -- '-----BEGIN PGP' "$part.raw"; then """
                     f"""tr -d '\\r' < "$part.raw" | {DEARMOR_AWK} | base64 -d > "$part"; """
                     """else cp -- "$part.raw" "$part"; fi""")
        lines.append(f"""[ -s "$part" ] || {{ echo {quote(f'downloaded key is empty: {url}')} >&2; exit 1; }}""")
    else:
        lines.append('mv -f -- "$part.raw" "$part"')
    lines += [f'chmod -- {mode} "$part"', f'mv -f -- "$part" {quote(dest)}', ")"]
    return "\n".join(lines)


@register
class AptRepositoryOperation(Operation):
    name = "apt_repository"
    reads_facts = frozenset({"arch"})  # the deb architecture when `architectures` is not given
    Args = AptRepositoryArgs
    offline_arguments = ("name", "uris", "suites", "components", "architectures", "key_url", "key_file",
                        "keyring_package_url", "keyring_package", "keyring_package_version", "sha256", "state")
    offline_reports_unrendered = True  # the packages are resolved with this repository

    def offline_needs(self, args: dict[str, Any], render_file: Callable[[str], str]) -> list[Need]:
        if args.get("state", "present") != "present":
            return []
        return [AptRepository(args), *(Download(str(args[key])) for key in URL_ARGUMENTS if args.get(key))]

    def probe(self, args: AptRepositoryArgs) -> Probe[dict[str, str]]:
        if args.keyring_package_url:
            package, _ = args.keyring_package_identity()
            return fields_probe(f"dpkg-query -W -f='keyring_package=${{Version}}\\t${{db:Status-Abbrev}}\\n' "
                               f"-- {quote(package)}")
        sources, keyring = quote(args.sources_path), quote(args.keyring_path)
        return fields_probe(
            f'[ -f {sources} ] && echo "sources=$(base64 -w0 < {sources})"\n'
            f"[ -s {keyring} ] && echo \"keyring_sha256=$(sha256sum < {keyring} | cut -d' ' -f1)\""
        )

    def plan(self, args: AptRepositoryArgs, facts: Any, fields: dict[str, str]) -> Plan:
        if args.keyring_package_url:
            return self._plan_keyring_package(args, fields)
        current = base64.b64decode(fields["sources"]).decode(errors="replace") if "sources" in fields else None
        if args.state == "absent":
            return self._plan_absent(args, current, fields)
        architectures = args.architectures
        if architectures is None:
            architectures = [arch] if (arch := deb_architecture(facts)) else []
        wanted = render_sources(args, architectures)
        commands: list[Step] = []
        summary: list[str] = []
        if args.key_file is not None:
            keyring = dearmor(args.key_file)
            if fields.get("keyring_sha256") != hashlib.sha256(keyring).hexdigest():
                script = atomic_write_script(args.keyring_path, mode="0644", owner_group="0:0", create_parent=True)
                commands.append(Command(script=script, data=keyring, description=f"write {args.keyring_path}"))
                summary.append(f"install key {args.keyring_path}")
        elif "keyring_sha256" not in fields or current != wanted:
            commands.append(Command(
                script=download_script(str(args.key_url), args.keyring_path, args.sha256, dearmor_keys=True),
                description=f"download key {args.key_url}",
            ))
            summary.append(f"download key {args.key_url}")
        sources_write = ""
        if current != wanted:
            sources_write = atomic_write_script(args.sources_path, mode="0644", owner_group="0:0",
                                                create_parent=True) + "\n"
            summary.append(f"{'update' if current is not None else 'add'} {args.sources_path}")
        if not commands and not sources_write:
            return Plan.ok(f"{args.sources_path} is up to date")
        commands.append(Command(script=sources_write + apt_update_script(APT_GET),
                                data=wanted.encode() if sources_write else None,
                                description=f"{'write ' + args.sources_path + ', ' if sources_write else ''}"
                                            "apt-get update"))
        return Plan(changed=True, steps=commands, summary="; ".join(summary) + "; apt-get update",
                    diff=text_diff(args.sources_path, current, wanted) if current != wanted else "")

    def _plan_absent(self, args: AptRepositoryArgs, current: str | None, fields: dict[str, str]) -> Plan:
        if current is None and "keyring_sha256" not in fields:
            return Plan.ok(f"{args.sources_path} is absent")
        script = (f"rm -f -- {quote(args.sources_path)}\nrm -f -- {quote(args.keyring_path)}\n"
                  f"{apt_update_script(APT_GET)}")
        return Plan(changed=True, steps=[Command(script=script, description=f"remove {args.sources_path}")],
                    summary=f"remove {args.sources_path} and {args.keyring_path}; apt-get update",
                    diff=text_diff(args.sources_path, current, None) if current is not None else "")

    def _plan_keyring_package(self, args: AptRepositoryArgs, fields: dict[str, str]) -> Plan:
        package, version = args.keyring_package_identity()
        installed, _, status = fields.get("keyring_package", "").partition("\t")
        if status.startswith("ii") and installed == version:
            return Plan.ok(f"{package} {version} is installed")
        deb = f"{DEB_CACHE}/{package}_{version}.deb"
        script = "\n".join([
            download_script(str(args.keyring_package_url), deb, args.sha256, dearmor_keys=False),
            f"{APT_GET} install --allow-downgrades -- {quote(deb)}",
            apt_update_script(APT_GET),
        ])
        was = f" (was {installed})" if installed and status.startswith("ii") else ""
        summary = f"install {package} {version}{was} from {args.keyring_package_url}; apt-get update"
        return Plan(changed=True, steps=[Command(script=script, description=summary)], summary=summary)

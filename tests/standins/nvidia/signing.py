"""Throwaway OpenPGP keys that sign the stand-in repositories, made with gpg in a temporary home.

Keys are Ed25519 (generated in milliseconds, accepted by apt since Debian 10) without a passphrase;
they exist only in the built repository, never on this machine's keyrings.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class SigningKey:
    """A public key as apt consumes it: fingerprint, ASCII-armored text and binary keyring bytes."""

    fingerprint: str
    armored: str
    binary: bytes


class ThrowawayGpg:
    """A gpg home that lives as long as the `with` block; generates keys and signs Release files."""

    def __init__(self) -> None:
        # a short path: gpg-agent's socket path must fit in sockaddr_un
        self.home = Path(tempfile.mkdtemp(prefix="sg", dir="/tmp"))
        self.home.chmod(0o700)

    def __enter__(self) -> ThrowawayGpg:
        return self

    def __exit__(self, *exc: object) -> None:
        subprocess.run(["gpgconf", "--kill", "all"], env=self._env(), capture_output=True, check=False)
        shutil.rmtree(self.home, ignore_errors=True)

    def _env(self) -> dict[str, str]:
        return {**os.environ, "GNUPGHOME": str(self.home)}

    def _gpg(self, *args: str) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(
            ["gpg", "--batch", "--yes", "--quiet", "--pinentry-mode", "loopback", "--passphrase", "", *args],
            env=self._env(), capture_output=True, check=True)

    def generate(self, user_id: str) -> SigningKey:
        """A new signing key for USER_ID."""
        self._gpg("--quick-gen-key", user_id, "ed25519", "sign", "never")
        listing = self._gpg("--with-colons", "--list-keys", user_id).stdout.decode()
        fingerprint = next(line.split(":")[9] for line in listing.splitlines() if line.startswith("fpr:"))
        armored = self._gpg("--armor", "--export", fingerprint).stdout.decode()
        binary = self._gpg("--export", fingerprint).stdout
        return SigningKey(fingerprint=fingerprint, armored=armored, binary=binary)

    def sign_release(self, key: SigningKey, release: Path) -> None:
        """Write InRelease (clear-signed) and Release.gpg (detached, armored) beside RELEASE."""
        self._gpg("--local-user", key.fingerprint, "--digest-algo", "SHA512", "--clearsign",
                  "--output", str(release.with_name("InRelease")), str(release))
        self._gpg("--local-user", key.fingerprint, "--digest-algo", "SHA512", "--armor", "--detach-sign",
                  "--output", str(release.with_name("Release.gpg")), str(release))

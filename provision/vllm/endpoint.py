"""Where a served model answers on its host, and how scripts on that host call it.

Every HTTP check runs ON the host, with curl against 127.0.0.1:PORT: no port forwarding, and it
works behind any firewall. The API key never leaves the host and never appears in an argument
vector: the script reads it from the key file (root-only) into a shell variable and hands curl its
`Authorization` header through a config on a pipe (`-K <(...)`), written by the `printf` builtin.
"""

from __future__ import annotations

from dataclasses import dataclass

from provision.shell import quote as shell_quote


@dataclass(frozen=True)
class Endpoint:
    """A systemd-managed model server: unit/container name, host port, API key file, served model name."""

    name: str
    port: int
    key_file: str
    served_name: str

    @property
    def unit(self) -> str:
        return f"{self.name}.service"

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def auth_prelude(self) -> str:
        """Bash defining `auth`, which prints curl's header config when the key file holds a key."""
        return (
            f"api_key=$(head -n 1 {shell_quote(self.key_file)} 2>/dev/null || true)\n"
            "auth() {\n"
            "  if [ -n \"$api_key\" ]; then printf 'header = \"Authorization: Bearer %s\"\\n' \"$api_key\"; fi\n"
            "}"
        )

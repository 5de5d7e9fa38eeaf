"""SSH connections through fabric/paramiko, with host keys checked and transient failures retried.

Fabric reads ~/.ssh/config (HostName, User, Port, IdentityFile, ProxyJump) and uses the agent; we
replace its accept-any-key default (paramiko's AutoAddPolicy, on every ProxyJump hop too) with
known_hosts checking on the target and on every hop alike (known_hosts.py): an unknown key is
refused unless the user opted into trust-on-first-use (`--trust-new-host-keys`), a changed or
revoked key is always refused.
Each `run` is one exec channel: one round trip.
"""

from __future__ import annotations

import select
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import paramiko
from fabric import Config
from fabric import Connection as FabricConnection
from tenacity import RetryError, retry, retry_if_exception, stop_after_attempt, stop_after_delay, wait_exponential

from provision.connection.base import CommandResult, LineStream, checked, read_at_once, wrap_script
from provision.connection.become import BecomeFailed, become_command, handshake
from provision.connection.known_hosts import (
    DEFAULT_GLOBAL_FILES,
    DEFAULT_USER_FILES,
    HostKeyPolicy,
    KnownHosts,
    host_key_name,
)
from provision.errors import HostKeyRefused, HostUnreachable
from provision.secrets import Secret
from provision.shell import Command

TRANSIENT_ERRORS = (
    paramiko.ssh_exception.NoValidConnectionsError,
    socket.timeout,
    TimeoutError,
    ConnectionResetError,
    ConnectionRefusedError,
    EOFError,
    paramiko.ssh_exception.SSHException,
)
CHUNK = 65536
EOF_AFTER_EXIT_S = 2.0
OUTPUT_WAIT_S = 0.05


UPLOAD_CHUNK = 1024 * 1024


class SSHConnection:
    """One SSH session to one host; scripts run through `bash -s` (as root through sudo, see become.py)."""

    def __init__(
        self,
        host_name: str,
        address: str,
        port: int | None = None,
        user: str | None = None,
        key_file: Path | None = None,
        known_hosts: Path | None = None,
        become: bool = True,
        become_user: str = "root",
        become_password: Secret | None = None,
        trust_new_host_keys: bool = False,
        connect_timeout: float = 10,
        connect_attempts: int = 4,
        keepalive_s: int = 5,
        command_timeout_s: float | None = None,
    ) -> None:
        self.host_name = host_name
        self.round_trips = 0
        self._become = become
        self._become_user = become_user
        self._become_password = become_password
        self._trust_new = trust_new_host_keys
        self._connect_attempts = connect_attempts
        self._keepalive_s = keepalive_s
        self._command_timeout_s = command_timeout_s
        connect_kwargs: dict[str, object] = {"banner_timeout": connect_timeout, "auth_timeout": connect_timeout}
        if key_file:
            connect_kwargs["key_filename"] = [str(key_file)]
        self._fabric = FabricConnection(
            host=address, port=port, user=user, config=Config(),
            connect_timeout=int(connect_timeout), connect_kwargs=connect_kwargs,
        )
        self._user_known_hosts = [known_hosts.expanduser()] if known_hosts else \
            _configured_files(self._fabric.ssh_config.get("userknownhostsfile"), DEFAULT_USER_FILES)
        self._global_known_hosts = _configured_files(self._fabric.ssh_config.get("globalknownhostsfile"),
                                                     DEFAULT_GLOBAL_FILES)
        # where a key learnt on first use is written: the first user file (ssh's choice too)
        self.known_hosts = (self._user_known_hosts or [Path(DEFAULT_USER_FILES[0]).expanduser()])[0]
        self._is_become_user = self._fabric.user == become_user

    def open(self) -> SSHConnection:
        """Connect (retrying transient failures); raise HostUnreachable / HostKeyRefused."""
        known = KnownHosts([self.known_hosts, *self._user_known_hosts[1:]], self._global_known_hosts)
        hops = self._hops()
        for hop in hops:
            _check_host_keys(hop, known, self._trust_new)
        try:
            self._connect_with_retries()
        except paramiko.BadHostKeyException as error:
            hop = next((hop for hop in hops if hop.host == error.hostname), self._fabric)
            raise known.changed(host_key_name(hop.host, hop.port), error.key) from error
        except HostKeyRefused:
            raise
        except paramiko.AuthenticationException as error:
            raise HostUnreachable(f"{self.host_name}: authentication failed for user "
                                  f"{self._fabric.user}: {error}") from error
        except RetryError as error:
            cause = error.last_attempt.exception()
            raise HostUnreachable(f"{self.host_name}: cannot connect to {self._fabric.host}:"
                                  f"{self._fabric.port} after {self._connect_attempts} attempts: {cause}") from cause
        transport = self._fabric.client.get_transport()
        if transport is not None and self._keepalive_s:
            transport.set_keepalive(self._keepalive_s)
        self.round_trips += 1
        return self

    def _hops(self) -> list[FabricConnection]:
        """The target and each ProxyJump hop fabric will open to reach it (a ProxyCommand is not a
        hop: what it reaches is the target, whose key is checked)."""
        hops = [self._fabric]
        while isinstance(hops[-1].gateway, FabricConnection):
            hops.append(hops[-1].gateway)
        return hops

    def _connect_with_retries(self) -> None:
        @retry(
            retry=retry_if_exception(is_transient),
            stop=stop_after_attempt(self._connect_attempts) | stop_after_delay(120),
            wait=wait_exponential(multiplier=0.5, max=8),
        )
        def connect() -> None:
            if self._fabric.is_connected:
                return
            try:
                self._fabric.open()
            except Exception:
                self._fabric.client.close()
                raise

        connect()

    def run(
        self, script: str, *, sudo: bool = True, data: bytes | None = None,
        env: dict[str, str] | None = None, timeout: float | None = None,
        on_output: Callable[[str], None] | None = None,
    ) -> CommandResult:
        """Run a bash script on the host; the script (and payload) go on stdin, not argv."""
        self.round_trips += 1
        with self._lost_connection():
            channel, early_stderr = self._open_shell(sudo)
            channel.sendall(read_at_once(wrap_script(script, data, env)))
            channel.shutdown_write()
            return _collect(channel, timeout or self._command_timeout_s, on_output, early_stderr)

    def run_command(self, command: Command, check: bool = True) -> CommandResult:
        return checked(self, command, check)

    def start(self, script: str, *, sudo: bool = True, env: dict[str, str] | None = None) -> LineStream:
        """Start a long-running script on its own channel (as run does) and return its stdout lines as
        they come; closing the stream closes the channel: the script reads end of file on stdin at
        once, and its next write fails (EPIPE)."""
        with self._lost_connection():
            channel, _ = self._open_shell(sudo)
            channel.sendall(read_at_once(wrap_script(script, None, env, keep_stdin=True)))
        return LineStream(channel.makefile("rb"), channel.close)

    def _open_shell(self, sudo: bool) -> tuple[paramiko.Channel, bytes]:
        """A channel running bash on stdin, as the become user when asked (a sudo password is sent only
        at sudo's own prompt); also what sudo wrote on stderr before bash started."""
        transport = self._fabric.client.get_transport()
        if transport is None or not transport.is_active():
            raise HostUnreachable(f"{self.host_name}: connection lost")
        channel = transport.open_session()
        as_root = sudo and self._become and not self._is_become_user
        channel.exec_command(become_command(self._become_user, self._become_password) if as_root else "bash -s")
        if not (as_root and self._become_password is not None):
            return channel, b""
        try:
            return channel, handshake(lambda: _ready_stderr(channel), channel.sendall, channel.exit_status_ready,
                                      self._become_password, self.host_name)
        except BecomeFailed:
            channel.close()
            raise

    def upload(self, local: Path, remote: str, offset: int, advance: Callable[[int], None]) -> None:
        """Append `local` from byte `offset` to `remote` (SFTP, as the login user), calling `advance`
        with each chunk's size: a copy cut off resumes where the remote file ends."""
        self.round_trips += 1
        with self._lost_connection():
            sftp = self._fabric.client.open_sftp()
            try:
                with local.open("rb") as source, sftp.open(remote, "ab") as target:
                    target.set_pipelined(True)
                    source.seek(offset)
                    while chunk := source.read(UPLOAD_CHUNK):
                        target.write(chunk)
                        advance(len(chunk))
            finally:
                sftp.close()

    @contextmanager
    def _lost_connection(self) -> Iterator[None]:
        """A connection that died under a call (the silence watchdog closed it, or the host reset it)
        is HostUnreachable, not the error paramiko happened to raise: a channel asked of a silent host
        waits for its answer until the transport closes, then raises the transport thread's saved
        EOFError, with no message (paramiko transport.py, Transport.open_channel: `e =
        self.get_exception(); raise e`; seen as `internal error: EOFError:` on a host frozen mid-run)."""
        try:
            yield
        except (EOFError, OSError, paramiko.SSHException) as error:
            transport = self._fabric.client.get_transport()
            if isinstance(error, EOFError) or transport is None or not transport.is_active():
                raise HostUnreachable(f"{self.host_name}: the connection was lost "
                                      f"({type(error).__name__}{': ' + str(error) if str(error) else ''})") from error
            raise

    def close(self) -> None:
        self._fabric.close()


def _check_host_keys(hop: FabricConnection, known: KnownHosts, trust_new: bool) -> None:
    """Give the hop's client the host's plain keys on file (paramiko compares the key it is shown with
    them, and asks the policy when there are none) in place of fabric's accept-anything policy."""
    name = host_key_name(hop.host, hop.port)
    keys = hop.client.get_host_keys()
    keys.clear()
    for key_type, key in known.plain_keys(name):
        keys.add(name, key_type, key)
    hop.client.set_missing_host_key_policy(HostKeyPolicy(known, trust_new))


def _configured_files(value: str | None, default: tuple[str, ...]) -> list[Path]:
    """ssh_config(5)'s `UserKnownHostsFile` / `GlobalKnownHostsFile`: files separated by whitespace,
    `none` for no file."""
    names = value.split() if value else list(default)
    return [Path(name).expanduser() for name in names if name.lower() != "none"]


def is_transient(error: BaseException) -> bool:
    """Worth another try: refused, reset, timed out; never a bad key or failed authentication."""
    permanent = (paramiko.BadHostKeyException, paramiko.AuthenticationException, HostKeyRefused)
    return isinstance(error, TRANSIENT_ERRORS) and not isinstance(error, permanent)


def _ready_stderr(channel: paramiko.Channel) -> bytes:
    return channel.recv_stderr(CHUNK) if channel.recv_stderr_ready() else b""


def _wait_for_output(channel: paramiko.Channel) -> None:
    """Block until the command writes (stdout or stderr) or ends, or OUTPUT_WAIT_S passes: no polling
    loop per command (20 hosts' probes are 20 threads that would wake 100 times a second each, on the
    cores the hosts' own work needs). paramiko's fileno() is a pipe set by either stream's data and at
    end of file; after end of file it stays set, so the wait for the exit status that follows sleeps."""
    if channel.eof_received:
        channel.status_event.wait(OUTPUT_WAIT_S)
    else:
        select.select([channel], [], [], OUTPUT_WAIT_S)


def _collect(channel: paramiko.Channel, timeout: float | None,
             on_output: Callable[[str], None] | None, early_stderr: bytes = b"") -> CommandResult:
    """Read stdout/stderr until the command exits (or the timeout passes: rc -1)."""
    deadline = time.monotonic() + timeout if timeout else None
    out, err = bytearray(), bytearray(early_stderr)
    pending = ""
    exited_at = 0.0
    channel.settimeout(0.2)
    while True:
        progressed = False
        while channel.recv_ready():
            chunk = channel.recv(CHUNK)
            out += chunk
            progressed = True
            if on_output:
                pending += chunk.decode(errors="replace")
                *lines, pending = pending.split("\n")
                for line in lines:
                    on_output(line)
        while channel.recv_stderr_ready():
            err += channel.recv_stderr(CHUNK)
            progressed = True
        if channel.exit_status_ready() and not channel.recv_ready() and not channel.recv_stderr_ready():
            # sshd sends exit-status when it reaps the command, and the last of its output after that,
            # then EOF (OpenSSH session.c: session_exit_message; seen as a probe cut short at random,
            # and in ManageIQ/integration_tests#6816): the output is whole only at EOF. A background
            # process that kept stdout open never lets EOF come: wait for it a short while only.
            if channel.eof_received or channel.closed:
                break
            exited_at = exited_at or time.monotonic()
            if time.monotonic() - exited_at > EOF_AFTER_EXIT_S:
                break
        if channel.closed:  # the transport went away under us (closed by the silence watchdog, or reset)
            raise HostUnreachable("the connection was lost while a command ran")
        if deadline and time.monotonic() > deadline:
            channel.close()
            return CommandResult(out.decode(errors="replace"), err.decode(errors="replace") + "\n(timed out)", -1)
        if not progressed:
            _wait_for_output(channel)
    rc = channel.recv_exit_status()
    transport = channel.get_transport()
    channel.close()
    if rc == -1 and (transport is None or not transport.is_active()):  # closed with no exit status: gone
        raise HostUnreachable("the connection was lost while a command ran")
    return CommandResult(out.decode(errors="replace"), err.decode(errors="replace"), rc)

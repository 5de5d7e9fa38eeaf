"""The weights for a bundle, fetched on this machine over the hub protocol the model role uses
(provision/ops/hf_snapshot.py): the revision's file list, then each file by commit, resumed from
its `.part` with a Range request and checked (LFS sha256, else the git blob sha1).

The bundle keeps them as a static copy of the hub's own URLs (`hub/api/models/REPO/revision/REV`,
`hub/REPO/resolve/COMMIT/PATH`), so on the host hf_snapshot reads them from `file://.../hub` with
the same code, checks and cache layout as from the hub itself.
"""

from __future__ import annotations

import hashlib
import urllib.error
import urllib.request
from pathlib import Path

from provision.bundle.progress import Transfer
from provision.errors import ProvisionError
from provision.hub_token import AUTHORIZATION, OPENER, sends_token
from provision.ops.hf_snapshot import HfSnapshotArgs, RepoFile, api_url, file_url, parse_file_list
from provision.secrets import Secret

CHUNK = 1024 * 1024


def _request(url: str, token: Secret | None, offset: int = 0, trusted_http: bool = False) -> urllib.request.Request:
    """A GET of `url`, the token only where it may go (provision/hub_token.py: https, or a trusted http
    mirror; a redirect to another origin drops it)."""
    request = urllib.request.Request(url)
    if token is not None and sends_token(url, trusted_http):
        request.add_header(AUTHORIZATION, f"Bearer {token.reveal()}")
    if offset:
        request.add_header("Range", f"bytes={offset}-")
    return request


def file_list(endpoint: str, repo: str, revision: str, token: Secret | None,
              trusted_http: bool = False) -> tuple[str, list[RepoFile], bytes]:
    """(commit, files, the hub's answer as it came) for a revision."""
    args = HfSnapshotArgs(repo=repo, revision=revision, cache_dir="/unused", endpoint=endpoint, token=token)
    try:
        with OPENER.open(_request(api_url(args), args.token, trusted_http=trusted_http), timeout=60) as answer:
            body = answer.read()
    except (urllib.error.URLError, OSError) as error:
        raise ProvisionError(f"cannot read the file list of {repo}@{revision} from {endpoint}: {error}") from error
    commit, files = parse_file_list(body.decode(errors="replace"), endpoint)
    return commit, files, body


def api_path(hub: Path, repo: str, revision: str) -> Path:
    return hub / "api" / "models" / repo / "revision" / revision


def resolve_path(hub: Path, repo: str, commit: str, path: str) -> Path:
    return hub / repo / "resolve" / commit / path


def matches(repo_file: RepoFile, path: Path) -> bool:
    digest = hashlib.sha256() if repo_file.kind == "sha256" else hashlib.sha1(f"blob {repo_file.size}\0".encode())
    with path.open("rb") as handle:
        while chunk := handle.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest() == repo_file.etag


def fetch(endpoint: str, repo: str, commit: str, repo_file: RepoFile, target: Path, token: Secret | None,
          transfer: Transfer, trusted_http: bool = False) -> None:
    """One file into `target`, resuming its `.part`; renamed only when its size and hash match."""
    args = HfSnapshotArgs(repo=repo, revision=commit, cache_dir="/unused", endpoint=endpoint)
    target.parent.mkdir(parents=True, exist_ok=True)
    part = target.with_name(target.name + ".part")
    have = part.stat().st_size if part.exists() else 0
    if have > repo_file.size:
        part.unlink()
        have = 0
    transfer.advance(have)
    if have < repo_file.size:
        try:
            with OPENER.open(_request(file_url(args, commit, repo_file.path), token, have, trusted_http),
                             timeout=60) as answer:
                if have and answer.status != 206:  # the server ignored the Range: start again
                    part.unlink()
                    transfer.advance(-have)
                with part.open("ab") as handle:
                    while chunk := answer.read(CHUNK):
                        handle.write(chunk)
                        transfer.advance(len(chunk))
        except (urllib.error.URLError, OSError) as error:
            raise ProvisionError(f"downloading {repo}/{repo_file.path} failed: {error} (run again: it resumes)") \
                from error
    got = part.stat().st_size
    if got < repo_file.size:  # the connection ended early without an error: the part is kept
        raise ProvisionError(f"downloading {repo}/{repo_file.path} stopped at {got} of {repo_file.size} bytes "
                             "(run again: it resumes)")
    if got != repo_file.size or not matches(repo_file, part):
        part.unlink()
        raise ProvisionError(f"{repo}/{repo_file.path}: the downloaded file is not the hub's "
                             f"({repo_file.kind} {repo_file.etag}); removed, run again")
    part.replace(target)

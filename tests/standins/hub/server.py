"""Stand-in Hugging Face Hub: the HF_ENDPOINT protocol for one generated model repository.

Enough of the Hub for the real `huggingface_hub` client (`hf download`, `snapshot_download`), as read
in huggingface_hub 2.4.0 (_snapshot_download.py, file_download.py, hf_api.py):
  GET  /api/models/{repo}[/revision/{rev}]   model info: sha, siblings (sizes, blobId, lfs with ?blobs=true)
  GET  /api/models/{repo}/tree/{rev}[/path]  file listing: type, oid, size, path, lfs {oid, size, pointerSize}
  HEAD/GET /{repo}/resolve/{rev}/{path}      X-Repo-Commit, ETag (git blob sha1, or for LFS files the
                                             quoted sha256 also as X-Linked-Etag) and X-Linked-Size,
                                             Content-Length, Accept-Ranges: bytes; Range -> 206
  GET  /api/whoami-v2                        the token's owner (401 without a valid token)
No X-Xet-* headers are ever sent, so the client downloads over plain HTTP. Errors carry the
X-Error-Code header the client maps to its exceptions (RepoNotFound, RevisionNotFound,
EntryNotFound, GatedRepo). Options: a required token, a throttle in bytes/s, a one-time
connection drop after N bytes of each LFS file (the client then resumes with a Range request), and
a status that a file's downloads get instead of the file.
Every request is appended to a JSON-lines request log.
"""

from __future__ import annotations

import json
import re
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from .repo import Repository, lfs_pointer

CHUNK = 64 * 1024
GATED_MESSAGE = ("Access to model {repo} is restricted. You must have access to it and be authenticated "
                 "to access it. Please log in.")


@dataclass
class HubOptions:
    """Behaviour knobs of the stand-in hub."""

    token: str | None = None
    throttle_bytes_per_s: int = 0
    drop_after_bytes: int = 0
    request_log: Path | None = None
    # a file's path -> the status its downloads get: a mirror that lost it (404 EntryNotFound, the
    # listing still names it), a rate limit (429), an outage (503)
    refuse: dict[str, int] = field(default_factory=dict)


@dataclass
class HubState:
    """Shared by the handler threads: the repository, options, and the request log."""

    repository: Repository
    options: HubOptions
    requests: list[dict[str, Any]] = field(default_factory=list)
    dropped: set[str] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, entry: dict[str, Any]) -> None:
        with self.lock:
            self.requests.append(entry)
            if self.options.request_log is not None:
                with self.options.request_log.open("a") as log:
                    log.write(json.dumps(entry) + "\n")

    def take_drop(self, path: str) -> bool:
        """True the first time `path` is downloaded in full, when drops are configured."""
        with self.lock:
            if not self.options.drop_after_bytes or path in self.dropped:
                return False
            self.dropped.add(path)
            return True


class HubServer(ThreadingHTTPServer):
    """The stand-in hub bound to (host, port); port 0 picks a free one."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], state: HubState) -> None:
        super().__init__(address, HubRequestHandler)
        self.state = state

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}"


class HubRequestHandler(BaseHTTPRequestHandler):
    """One connection from the hub client (HTTP/1.1 keep-alive)."""

    protocol_version = "HTTP/1.1"
    server: HubServer

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the JSON request log is the record."""

    # --- helpers ---

    def _finish(self, status: int, headers: dict[str, str], body: bytes = b"") -> None:
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        if "Content-Length" not in headers:
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD" and body:
            self.wfile.write(body)
        self._record(status, 0 if self.command == "HEAD" else len(body))

    def _record(self, status: int, bytes_sent: int) -> None:
        auth = self.headers.get("Authorization")
        self.server.state.record({
            "time": time.time(), "method": self.command, "path": urlsplit(self.path).path,
            "query": urlsplit(self.path).query, "range": self.headers.get("Range"), "status": status,
            "bytes_sent": bytes_sent, "authorization": "none" if not auth else (
                "valid" if self._token_ok() else "invalid"),
        })

    def _json(self, status: int, payload: Any, extra: dict[str, str] | None = None) -> None:
        self._finish(status, {"Content-Type": "application/json; charset=utf-8", **(extra or {})},
                     json.dumps(payload).encode())

    def _error(self, status: int, code: str, message: str) -> None:
        headers = {"X-Error-Code": code, "X-Error-Message": message}
        if code == "EntryNotFound":
            headers["X-Repo-Commit"] = self.server.state.repository.commit
        self._json(status, {"error": message}, headers)

    def _token_ok(self) -> bool:
        token = self.server.state.options.token
        scheme, _, value = (self.headers.get("Authorization") or "").partition(" ")
        return token is None or (scheme.lower() == "bearer" and value == token)

    def _check_access(self) -> bool:
        """Gate the repository behind the token the way the Hub gates a repo: 401 GatedRepo."""
        if self._token_ok():
            return True
        if self.headers.get("Authorization"):
            self._error(401, "Unauthorized", "Invalid credentials in Authorization header")
        else:
            self._error(401, "GatedRepo", GATED_MESSAGE.format(repo=self.server.state.repository.repo_id))
        return False

    def _resolve_revision(self, revision: str) -> bool:
        repo = self.server.state.repository
        if revision in ("main", repo.commit):
            return True
        self._error(404, "RevisionNotFound", f"Invalid rev id: {revision}")
        return False

    # --- routes ---

    def do_HEAD(self) -> None:
        self.do_GET()

    def do_GET(self) -> None:
        repo = self.server.state.repository
        path = unquote(urlsplit(self.path).path)
        query = parse_qs(urlsplit(self.path).query)
        if path == "/api/whoami-v2":
            if self.server.state.options.token is None or not self.headers.get("Authorization") \
                    or not self._token_ok():
                self._error(401, "Unauthorized", "Invalid credentials in Authorization header")
            else:
                self._json(200, {"type": "user", "name": "standin", "fullname": "Stand-in User",
                                 "auth": {"type": "access_token",
                                          "accessToken": {"displayName": "standin", "role": "read"}}})
            return
        api = re.fullmatch(rf"/api/models/{re.escape(repo.repo_id)}(?:/revision/([^/]+))?", path)
        tree = re.fullmatch(rf"/api/models/{re.escape(repo.repo_id)}/tree/([^/]+)(?:/(.*))?", path)
        resolve = re.fullmatch(rf"/{re.escape(repo.repo_id)}/resolve/([^/]+)/(.+)", path)
        if not (api or tree or resolve):
            if path.startswith(("/api/models/", "/api/")) or "/resolve/" in path:
                self._error(404 if self._token_ok() else 401, "RepoNotFound", "Repository not found")
            else:
                self._json(404, {"error": "Not Found"})
            return
        if not self._check_access():
            return
        if api:
            if self._resolve_revision(api.group(1) or "main"):
                self._json(200, self._model_info(query.get("blobs", ["false"])[0] in ("true", "True", "1")))
        elif tree:
            if self._resolve_revision(tree.group(1)):
                prefix = (tree.group(2) or "").strip("/")
                entries = [self._tree_entry(f.path) for f in repo.files
                           if not prefix or f.path.startswith(prefix + "/")]
                self._json(200, entries)
        elif resolve and self._resolve_revision(resolve.group(1)):
            self._serve_file(resolve.group(2))

    def _model_info(self, blobs: bool) -> dict[str, Any]:
        repo = self.server.state.repository
        siblings = []
        for f in repo.files:
            sibling: dict[str, Any] = {"rfilename": f.path}
            if blobs:
                sibling |= {"blobId": f.blob_id, "size": f.size}
                if f.lfs_sha256:
                    sibling["lfs"] = {"sha256": f.lfs_sha256, "size": f.size,
                                      "pointerSize": len(lfs_pointer(f.lfs_sha256, f.size))}
            siblings.append(sibling)
        org = repo.repo_id.split("/")[0]
        stamp = datetime.fromtimestamp(0, UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")
        return {"_id": repo.commit[:24], "id": repo.repo_id, "modelId": repo.repo_id, "author": org,
                "sha": repo.commit, "lastModified": stamp, "createdAt": stamp, "private": False,
                "gated": "auto" if self.server.state.options.token else False, "disabled": False,
                "downloads": 0, "likes": 0, "library_name": "transformers",
                "pipeline_tag": "image-text-to-text", "tags": ["transformers", "safetensors", "gemma4"],
                "siblings": siblings, "usedStorage": sum(f.size for f in repo.files)}

    def _tree_entry(self, path: str) -> dict[str, Any]:
        repo_file = self.server.state.repository.file(path)
        assert repo_file is not None
        entry: dict[str, Any] = {"type": "file", "oid": repo_file.blob_id, "size": repo_file.size,
                                 "path": repo_file.path}
        if repo_file.lfs_sha256:
            entry["lfs"] = {"oid": repo_file.lfs_sha256, "size": repo_file.size,
                            "pointerSize": len(lfs_pointer(repo_file.lfs_sha256, repo_file.size))}
        return entry

    def _serve_file(self, path: str) -> None:
        state = self.server.state
        repo_file = state.repository.file(path)
        refused = state.options.refuse.get(path)
        if repo_file is None or refused == 404:
            self._error(404, "EntryNotFound", f"{path} does not exist on \"main\"")
            return
        if refused:
            self._json(refused, {"error": f"refused by the stand-in hub (HTTP {refused})"})
            return
        headers = {"X-Repo-Commit": state.repository.commit, "ETag": f'"{repo_file.etag}"',
                   "Accept-Ranges": "bytes",
                   "Content-Type": "application/json" if path.endswith(".json") else "application/octet-stream"}
        if repo_file.lfs_sha256:
            headers |= {"X-Linked-Etag": f'"{repo_file.lfs_sha256}"', "X-Linked-Size": str(repo_file.size),
                        "Content-Disposition": f'inline; filename="{Path(path).name}"'}
        start, end = 0, repo_file.size - 1
        status = 200
        requested = self.headers.get("Range")
        if requested:
            match = re.fullmatch(r"bytes=(\d+)-(\d*)", requested.strip())
            if not match or int(match.group(1)) >= repo_file.size:
                self._finish(416, {**headers, "Content-Range": f"bytes */{repo_file.size}"})
                return
            start = int(match.group(1))
            end = min(int(match.group(2)) if match.group(2) else end, repo_file.size - 1)
            status = 206
            headers["Content-Range"] = f"bytes {start}-{end}/{repo_file.size}"
        headers["Content-Length"] = str(end - start + 1)
        if self.command == "HEAD":
            self._finish(status, headers)
            return
        drop = bool(repo_file.lfs_sha256) and start == 0 and state.take_drop(path)
        self._stream_range(state, repo_file.path, start, end, status, headers, drop)

    def _stream_range(self, state: HubState, path: str, start: int, end: int, status: int,
                      headers: dict[str, str], drop: bool) -> None:
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        limit = state.options.drop_after_bytes if drop else end - start + 1
        rate = state.options.throttle_bytes_per_s
        sent = 0
        began = time.monotonic()
        try:
            with (state.repository.folder / path).open("rb") as source:
                source.seek(start)
                while sent < limit:
                    chunk = source.read(min(CHUNK, limit - sent))
                    if not chunk:
                        break
                    self.wfile.write(chunk)
                    sent += len(chunk)
                    if rate:
                        ahead = began + sent / rate - time.monotonic()
                        if ahead > 0:
                            time.sleep(ahead)
        except (BrokenPipeError, ConnectionResetError):
            pass
        finally:
            self._record(status, sent)
        if drop:
            self.close_connection = True
            self.wfile.flush()
            self.connection.shutdown(2)


def read_request_log(path: Path) -> list[dict[str, Any]]:
    """The entries of a request log file (one JSON object a line)."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

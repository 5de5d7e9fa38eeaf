"""`hf_snapshot`: a Hugging Face model repository at a revision, in the host's HF cache, verified.

The files land in huggingface_hub's own cache layout, so vLLM (or any HF client) in a container that
mounts the cache finds them without network:
    CACHE/models--ORG--NAME/blobs/<etag>                    the content (etag: LFS sha256, else git blob sha1)
    CACHE/models--ORG--NAME/snapshots/<commit>/<path>       relative symlink to ../../blobs/<etag>
    CACHE/models--ORG--NAME/refs/<revision>                 the commit (branches and tags only)
The download runs ON the host with curl (the host reaches the hub; the tool's machine may not), one
file at a time to `blobs/<etag>.part` with `curl -C -`, so an interrupted download (a killed run, a
dropped connection) resumes where it stopped; a file is renamed into place only after its size and
hash match the hub's file list. The token never appears in an argument vector: curl reads its header
from a config on stdin, written by the `printf` builtin. A lock keeps two runs from writing the same
files. Progress (bytes so far of the total) shows in the live view.

Converged costs one probe: a revision that is a commit sha needs no network at all when its
snapshot is complete (a manifest beside the cache, `DIR/.provision/models--ORG--NAME/<commit>.manifest`,
lists every file and size, checked by `stat`); a branch or tag costs one API call (`GET
/api/models/REPO/revision/REV?blobs=true`). When the hub cannot be reached but the revision's snapshot
is complete, the cached snapshot is used (and said so). The registered result holds `commit`.
"""

from __future__ import annotations

import base64
import binascii
import json
import posixpath
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from typing import Any
from urllib.parse import quote as url_quote

from pydantic import Field, field_validator

from provision.errors import TaskFailed
from provision.escape import control_character, curl_config_string
from provision.hub_token import sends_token
from provision.ops.base import Action, ApplyContext, ApplyResult, OpArgs, Operation, Plan, Probe, only_step, register
from provision.ops.fields import SHA256, AbsolutePath, relative_path_problem, require_url
from provision.ops.needs import Need, Weights
from provision.ops.scripting import probe_block
from provision.ops.streaming import ProgressThrottle, run_streaming
from provision.ops.transfer_rate import TransferRate
from provision.secrets import Secret
from provision.shell import PERMANENT_FAILURE, Command, parse_fields, parse_records, quote

REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")
COMMIT = re.compile(r"^[0-9a-f]{40}$")
# what the hub's file list may name: a blob id or LFS sha256 (an etag, sent quoted in headers), a
# repository path. Each goes into the root download script, and the office cache's mirror is plain
# HTTP: anyone on the LAN who answers for it writes this list.
ETAG = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
# git check-ref-format(1): no control characters, space, ~ ^ : ? * [ \, no "..", "@{", "//", no
# component starting with "." or ending with ".lock", no leading or trailing "/" or trailing "."
REF_FORBIDDEN = re.compile(r"[\x00-\x20\x7f~^:?*\[\\]|\.\.|@\{|//|^/|/$|\.$|(^|/)\.|\.lock(/|$)|^@$|^-")
MIB = 1024 * 1024


class HfSnapshotArgs(OpArgs):
    repo: str
    revision: str = "main"
    cache_dir: AbsolutePath
    endpoint: str = "https://huggingface.co"
    token: Secret | None = None
    # the token over plain http too: the user marked this mirror trusted (provision/hub_token.py)
    token_over_http: bool = False
    attempts: int = Field(default=3, ge=1, le=20)
    # ranged connections per file and files at once (docs/downloads.md): the hub's CDN limits each
    # connection well below a fast link, which is why hf_transfer opens many per file
    connections: int = Field(default=8, ge=1, le=64)
    parallel_files: int = Field(default=4, ge=1, le=16)
    chunk_mib: int = Field(default=64, ge=1, le=1024)

    @field_validator("repo")
    @classmethod
    def _repo(cls, value: str) -> str:
        if not REPO_ID.match(value):
            raise ValueError(f"{value!r} is not a repository id like org/name")
        return value

    @field_validator("revision")
    @classmethod
    def _revision(cls, value: str) -> str:
        if not is_revision(value):
            raise ValueError(f"{value!r} is not a revision (a branch, tag or commit sha)")
        return value

    @field_validator("endpoint")
    @classmethod
    def _endpoint(cls, value: str) -> str:
        require_url(value)
        if not value.startswith(("http://", "https://", "file:///")):
            raise ValueError(f"endpoint must start with http://, https:// or file:/// (a bundle), not {value!r}")
        return value.rstrip("/")

    @field_validator("token", mode="before")
    @classmethod
    def _token(cls, value: object) -> Secret | None:
        if value in (None, ""):
            return None
        token = value if isinstance(value, Secret) else Secret(str(value))
        if control_character(token.reveal()):
            raise ValueError("the token holds a control character, which no HTTP header can carry")
        return token

    @property
    def storage(self) -> str:
        return posixpath.join(self.cache_dir, "models--" + self.repo.replace("/", "--"))

    @property
    def manifests(self) -> str:
        """Beside the cache, not in it (huggingface_hub's cache scan would call a stranger corrupt)."""
        return posixpath.join(posixpath.dirname(self.cache_dir), ".provision", posixpath.basename(self.storage))

    @property
    def sent_token(self) -> Secret | None:
        """The token where it may travel to the endpoint, else None (the request goes without it)."""
        return self.token if sends_token(self.endpoint, self.token_over_http) else None

    @property
    def is_commit(self) -> bool:
        return bool(COMMIT.match(self.revision))


@dataclass(frozen=True)
class RepoFile:
    path: str
    size: int
    etag: str
    kind: str  # "sha256" (LFS) or "git" (git blob sha1)

    def link_target(self) -> str:
        """The snapshot symlink's target, relative to the link's folder."""
        return "../" * (2 + self.path.count("/")) + f"blobs/{self.etag}"


@dataclass(frozen=True)
class Download(Action):
    """Run `download` (the `missing` ones of the snapshot's `files`, of `repo` from `endpoint`), its
    output read line by line into progress over the snapshot's bytes."""

    repo: str
    endpoint: str
    files: tuple[RepoFile, ...]
    missing: tuple[RepoFile, ...]
    download: Command


def is_revision(value: str) -> bool:
    """A commit sha or a valid git ref name (the hub accepts nothing else)."""
    return bool(value) and (bool(COMMIT.match(value)) or not REF_FORBIDDEN.search(value))


def auth_function(token: Secret | None) -> str:
    """Bash `auth`: prints curl's header config (a builtin: the token is in no argument vector)."""
    if token is None:
        return "auth() { :; }"
    header = f"header = {curl_config_string('Authorization: Bearer ' + token.reveal())}"
    return f"auth() {{ printf '%s\\n' {quote(header)}; }}"


def api_url(args: HfSnapshotArgs) -> str:
    return f"{args.endpoint}/api/models/{args.repo}/revision/{url_quote(args.revision, safe='')}?blobs=true"


def file_url(args: HfSnapshotArgs, commit: str, path: str) -> str:
    return f"{args.endpoint}/{args.repo}/resolve/{commit}/{url_quote(path)}"


# curl reads file:// URLs (an offline bundle's copy of the hub, provision/bundle/weights.py) with status
# 000: a file read is the hub's 200, a missing file (curl exit 37) its 404
FILE_STATUS = 'if [ "$rc" = 0 ]; then code=200; elif [ "$rc" = 37 ]; then code=404; fi'


def probe_script(args: HfSnapshotArgs) -> str:
    storage, manifests = quote(args.storage), quote(args.manifests)
    commit = f"commit={quote(args.revision)}" if args.is_commit else \
        f"commit=$(cat -- {storage}/refs/{quote(args.revision)} 2>/dev/null)"
    return f"""{commit}
echo "ref=$commit"
complete=0
if [ -n "$commit" ] && [ -f {manifests}/"$commit.manifest" ]; then
  complete=1
  while IFS=$'\\t' read -r size path; do
    [ -n "$path" ] || continue
    if [ "$(stat -L -c %s -- {storage}/snapshots/"$commit/$path" 2>/dev/null)" != "$size" ]; then complete=0; break; fi
  done < {manifests}/"$commit.manifest"
fi
echo "complete=$complete"
if [ "$complete" != 1 ] || [ {"1" if args.is_commit else "0"} != 1 ]; then
  if command -v curl >/dev/null 2>&1; then
    {auth_function(args.sent_token)}
    out=$(mktemp); err=$(mktemp)
    code=$(auth | curl -sS -K - --connect-timeout 15 --max-time 60 -o "$out" -w '%{{http_code}}' \\
      -- {quote(api_url(args))} 2>"$err") && rc=0 || rc=$?
    {FILE_STATUS if args.endpoint.startswith("file://") else ""}
    echo "api_status=$code"
    echo "api_body=$(base64 -w0 < "$out")"
    echo "api_error=$(head -c 500 "$err" | base64 -w0)"
    rm -f -- "$out" "$err"
  else
    echo "api_status=nocurl"
  fi
fi
[ -d {storage}/blobs ] && find {storage}/blobs -maxdepth 1 -type f -printf 'blob=%f\\t%s\\t%b\\n'
d={quote(args.cache_dir)}; while [ ! -d "$d" ]; do d=$(dirname -- "$d"); done
echo "avail=$(df -PB1 -- "$d" | awk 'NR == 2 {{ print $4 }}')"
"""


def _b64(value: str) -> str:
    try:
        return base64.b64decode(value, validate=True).decode(errors="replace")
    except (binascii.Error, ValueError):
        return ""


@dataclass(frozen=True)
class CacheState:
    """What the probe read: its `key=value` fields, and the blobs present (etag or `etag.part` -> size)."""

    fields: dict[str, str]
    blobs: dict[str, str]

    def size(self, name: str) -> str:
        """The file's size as listed ("" when absent)."""
        return self.blobs.get(name, "").split("\t")[0]

    def held(self, name: str, size: int) -> int:
        """Bytes a `.part` holds, at most `size`: its allocated blocks (a ranged download writes at
        offsets, so its length says nothing of the holes), else its length."""
        listed = self.blobs.get(name, "").split("\t")
        length = int(listed[0]) if listed[0].isdigit() else 0
        blocks = int(listed[1]) * 512 if len(listed) > 1 and listed[1].isdigit() else length
        return max(0, min(length, blocks, size))


def parse_cache_state(output: str) -> CacheState:
    fields = parse_fields(output)
    if "complete" not in fields:
        raise TaskFailed(f"the weights probe printed nothing usable: {output.strip()[:200]!r}")
    blobs = dict(record.split("\t", 1) for record in parse_records(output, "blob") if "\t" in record)
    return CacheState(fields, blobs)


def parse_file_list(body: str, source: str) -> tuple[str, list[RepoFile]]:
    """(commit, files) from the hub's model info with `?blobs=true`, every value checked against its
    format (TaskFailed naming `source`, the hub or mirror, and the field otherwise)."""
    try:
        info = json.loads(body)
        commit = str(info["sha"])
        files = [_listed_file(source, sibling) for sibling in info["siblings"]]
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        raise TaskFailed(f"the file list from {source} is not what was expected ({error}): {body[:200]!r}") \
            from error
    if not COMMIT.match(commit):
        raise TaskFailed(f"the file list from {source} names commit (field sha) {commit[:80]!r}, "
                         "which is not a commit sha")
    return commit, files


def _listed_file(source: str, sibling: dict[str, Any]) -> RepoFile:
    """One entry of the file list, refused unless its path, size and hash have their format."""
    path, size, lfs = str(sibling["rfilename"]), sibling["size"], sibling.get("lfs") or None
    problem = relative_path_problem(path)
    if problem:
        raise TaskFailed(f"the file list from {source} names a file (field rfilename) {path[:200]!r}: {problem}")
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise TaskFailed(f"the file list from {source} gives {path!r} the size {str(size)[:80]!r}, "
                         "which is not a byte count")
    if lfs:
        field_name, raw, pattern, form = "lfs.sha256", lfs["sha256"], SHA256, "64 hex digits"
    else:
        field_name, raw, pattern, form = "blobId", sibling["blobId"], ETAG, "40 or 64 hex digits"
    etag = str(raw).strip('"').lower()  # an etag is sent quoted (HTTP ETag); the hex is what is hashed
    if not pattern.fullmatch(etag):
        raise TaskFailed(f"the file list from {source} gives {path!r} the {field_name} {str(raw)[:80]!r}, "
                         f"which is not {form}")
    return RepoFile(path=path, size=size, etag=etag, kind="sha256" if lfs else "git")


def api_failure(args: HfSnapshotArgs, status: str, error: str, body: str) -> str:
    if status == "nocurl":
        return "curl is not installed on the host (it downloads the weights)"
    if status in ("", "000"):
        return f"cannot reach {args.endpoint} from the host: {error.strip() or 'no answer'}"
    if status in ("401", "403"):
        if args.sent_token:
            hint = "the token was refused"
        elif args.token:
            hint = (f"hf_token is not sent over plain http to {args.endpoint}: use https, or set "
                    "office_cache_trusted: true if that mirror is on a network you trust")
        else:
            hint = "set hf_token (a token with access to the repository)"
        return f"the hub refused access to {args.repo} (HTTP {status}): {hint}"
    if status == "404":
        return f"{args.repo} at revision {args.revision!r} was not found on {args.endpoint} (HTTP 404)"
    return f"the hub answered HTTP {status} for {args.repo}: {body.strip()[:200]}"


@register
class HfSnapshotOperation(Operation):
    name = "hf_snapshot"
    Args = HfSnapshotArgs
    offline_arguments = ("repo", "revision")

    def offline_needs(self, args: dict[str, Any], render_file: Callable[[str], str]) -> list[Need]:
        return [Weights(str(args["repo"]), str(args.get("revision") or "main"))] if args.get("repo") else []

    def probe(self, args: HfSnapshotArgs) -> Probe[CacheState]:
        return Probe(probe_block(probe_script(args)), parse_cache_state)

    def plan(self, args: HfSnapshotArgs, facts: Any, state: CacheState) -> Plan:
        fields = state.fields
        # the refs file is read back from the host: a commit sha, or nothing this run trusts
        local_commit = fields.get("ref", "") if COMMIT.match(fields.get("ref", "")) else ""
        complete = fields.get("complete") == "1" and bool(local_commit)
        status = fields.get("api_status")
        result = {"repo": args.repo, "revision": args.revision}
        if complete and (status is None or (status != "200" and local_commit)):
            offline = "" if status is None else \
                f" ({api_failure(args, status, _b64(fields.get('api_error', '')), '')}; using the cached snapshot)"
            return Plan.ok(f"{args.repo}@{local_commit[:12]} complete{offline}", **result, commit=local_commit,
                           snapshot=posixpath.join(args.storage, "snapshots", local_commit))
        body = _b64(fields.get("api_body", ""))
        if status == "nocurl":
            # only before an earlier task of the run installs curl (check mode on a fresh host)
            message = api_failure(args, status, "", "")
            return Plan(changed=True, summary=f"download {args.repo}@{args.revision} (file list not read: "
                        f"{message})", result={**result, "commit": ""},
                        steps=[Command(script=f"echo {quote(message)} >&2; exit 1",
                                       description=f"download {args.repo}")])
        if status == "404" and args.endpoint.startswith("file://"):
            # a bundle copied by an earlier task of the run (check mode on a fresh host): the download
            # is planned; should it run with the file still absent, it fails saying so
            message = api_failure(args, status, "", "")
            return Plan(changed=True, summary=f"download {args.repo}@{args.revision} from "
                        f"{args.endpoint} (its file list is not there yet)", result={**result, "commit": ""},
                        steps=[Command(script=f"echo {quote(message)} >&2; exit 1",
                                       description=f"download {args.repo}")])
        if status != "200":
            raise TaskFailed(api_failure(args, status or "", _b64(fields.get("api_error", "")), body))
        commit, files = parse_file_list(body, args.endpoint)
        result.update(commit=commit, snapshot=posixpath.join(args.storage, "snapshots", commit))
        if complete and local_commit == commit:
            return Plan.ok(f"{args.repo}@{commit[:12]} complete", **result)
        missing = [f for f in files if state.size(f.etag) != str(f.size)]
        resumable = sum(state.held(f"{f.etag}.part", f.size) for f in missing)
        needed = sum(f.size for f in missing) - resumable
        avail = fields.get("avail", "")
        if avail.isdigit() and needed > int(avail):
            raise TaskFailed(f"not enough disk for {args.repo}: {needed / MIB:.0f} MiB to download, "
                             f"{int(avail) / MIB:.0f} MiB free under {args.cache_dir}")
        if missing:
            summary = (f"download {len(missing)} of {len(files)} files of {args.repo}@{commit[:12]} "
                       f"({needed / MIB:.1f} MiB" + (f", resuming after {resumable / MIB:.1f} MiB" if resumable else "")
                       + ")")
        else:
            summary = f"link the snapshot of {args.repo}@{commit[:12]} (all files present)"
        command = Command(script=download_script(args, commit, files, missing), data=manifest(files),
                          description=f"download {args.repo}@{commit[:12]}")
        # an empty snapshot has no progress to show: its one command runs as any other
        step = Download(command.description, repo=args.repo, endpoint=args.endpoint, files=tuple(files),
                        missing=tuple(missing), download=command) if files else command
        # transferred_bytes: what this download moves, for the recap's timeline (runner/timeline.py)
        return Plan(changed=True, steps=[step], summary=summary, result={**result, "transferred_bytes": needed})

    def apply(self, ctx: ApplyContext, plan: Plan) -> ApplyResult:
        if all(isinstance(step, Command) for step in plan.steps):  # a failure to report, an empty snapshot
            return super().apply(ctx, plan)
        step = only_step(plan, Download)
        total, repo = sum(f.size for f in step.files), step.repo
        throttle = ProgressThrottle(ctx.progress)
        current = {"file": ""}
        rate = TransferRate(time.monotonic)
        source = step.endpoint.split("://", 1)[-1]

        def on_line(line: str) -> None:
            key, _, value = line.partition("=")
            if key == "file":
                current["file"] = value
            elif key == "progress" and value.isdigit():
                done = int(value)
                throttle(f"downloading {repo} ({current['file']}) from {source}: {done / MIB:.0f} of "
                         f"{total / MIB:.0f} MiB{rate.text(done)}", done, total)

        run_streaming(ctx.conn, step.download, on_line)
        return ApplyResult(changed=True, result=dict(plan.result))


def manifest(files: list[RepoFile]) -> bytes:
    """The snapshot's manifest: `size<TAB>path` lines (what the probe checks with stat)."""
    return "".join(f"{f.size}\t{f.path}\n" for f in files).encode()


def fetch_functions() -> str:
    """hf_fetch.sh's text: the download functions (one connection or ranged, several files at once).
    The free space is checked again before each file (another process may have filled the disk since
    the probe), and a write failure (curl exit 23) is reported as what it is: a full filesystem, named."""
    return resources.files("provision.ops").joinpath("hf_fetch.sh").read_text(encoding="utf-8")


def split_ranges(size: int, chunk: int) -> list[str]:
    """HTTP byte ranges (`start-end`, inclusive, RFC 9110 section 14.1.2) covering `size` bytes in
    pieces of `chunk`; the last one holds the rest."""
    if size <= 0 or chunk <= 0:
        return []
    return [f"{start}-{min(start + chunk, size) - 1}" for start in range(0, size, chunk)]


def ranged(args: HfSnapshotArgs, size: int) -> bool:
    """Whether a file comes by several ranged requests: over HTTP(S) (a bundle's file:// is a local
    read), with more than one connection, and larger than one chunk."""
    return args.connections > 1 and not args.endpoint.startswith("file://") and size > args.chunk_mib * MIB


def download_script(args: HfSnapshotArgs, commit: str, files: list[RepoFile], missing: list[RepoFile]) -> str:
    """Bash that fetches the missing files (printing `file=` and `progress=` lines), links every file
    into the snapshot, writes the manifest (payload on fd 3) and, for a branch or tag, the ref."""
    missing_etags = {f.etag for f in missing}
    snapshot = f'"$storage/snapshots/"{quote(commit)}'
    wanted = " ".join(quote(f"{f.etag}:{f.size}") for f in {f.etag: f for f in missing}.values())
    lines = [
        f"storage={quote(args.storage)}; manifests={quote(args.manifests)}; attempts={args.attempts}",
        f"connections={args.connections}; parallel_files={args.parallel_files}; wanted=({wanted})",
        f"for_good={PERMANENT_FAILURE}",
        f"done_bytes={sum(f.size for f in files if f.etag not in missing_etags)}",
        f'mkdir -p -- "$storage/blobs" {snapshot} "$storage/refs" "$manifests"',
        'exec 9>"$manifests/lock"',
        'if ! flock -n 9; then echo "waiting for another download of this repository on the host" >&2; '
        'flock -w 3600 9; fi',
        auth_function(args.sent_token),
        fetch_functions(),
        # a vanished tool (killed, connection lost) breaks stdout: stop the downloads, leave the .part
        "trap stop_all EXIT",
        "trap 'exit 141' PIPE; trap 'exit 143' TERM HUP INT",
    ]
    fetched: set[str] = set()
    for repo_file in files:
        if repo_file.etag in missing_etags and repo_file.etag not in fetched:
            fetched.add(repo_file.etag)
            how = "fetch_ranged" if ranged(args, repo_file.size) else "fetch"
            ranges = split_ranges(repo_file.size, args.chunk_mib * MIB) if how == "fetch_ranged" else []
            lines.append(" ".join([f"start {how} {quote(repo_file.etag)} {repo_file.size} {quote(repo_file.kind)}",
                                   quote(file_url(args, commit, repo_file.path)), quote(repo_file.path), *ranges]))
    lines.append("wait_slots 1; report")
    for repo_file in files:
        path = quote(repo_file.path)
        folder = posixpath.dirname(repo_file.path)
        if folder:
            lines.append(f"mkdir -p -- {snapshot}/{quote(folder)}")
        lines.append(f"ln -sfn -- {quote(repo_file.link_target())} {snapshot}/{path}")
    lines.append(f'tmp=$(mktemp -- "$manifests/.manifest.XXXXXX"); cat <&3 > "$tmp"; '
                 f'mv -f -- "$tmp" "$manifests/"{quote(commit + ".manifest")}')
    if not args.is_commit:
        ref = quote(args.revision)
        lines.append(f'mkdir -p -- "$(dirname -- "$storage/refs/"{ref})"')
        lines.append(f'tmp=$(mktemp -- "$storage/refs/.ref.XXXXXX"); printf %s {quote(commit)} > "$tmp"; '
                     f'mv -f -- "$tmp" "$storage/refs/"{ref}')
    lines.append("echo done=1")
    return "\n".join(lines)

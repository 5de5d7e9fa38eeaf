#!/bin/bash
# docker pull with byte progress. Without a terminal `docker pull` prints only layer states; the
# Engine API's POST /images/create streams the same pull as JSON lines whose progressDetail holds
# each layer's current and total bytes (docs.docker.com/reference/api/engine: ImageCreate). The API
# is used when curl and the daemon's socket are there and the docker CLI holds no registry
# credentials (logins are the CLI's, not the daemon's: a private registry then goes through
# `docker pull`, with layer counts only). An error arrives as a JSON line: the script fails on it.
# Environment: IMAGE (the reference), FROM_IMAGE and TAG (the API's query: repository, tag or digest).
set -uo pipefail
socket=/var/run/docker.sock
relay() {  # pass the JSON lines on; fail when one is an error
  local line failed=0
  while IFS= read -r line; do
    printf '%s\n' "$line"
    case $line in *'"error"'* | *'"message"'*) failed=1 ;; esac
  done
  return "$failed"
}
logged_in() { grep -qsE '"(auths|credsStore|credHelpers)"' "${HOME:-/root}/.docker/config.json" /root/.docker/config.json; }
if command -v curl >/dev/null 2>&1 && [ -S "$socket" ] && ! logged_in; then
  curl -sS -N --unix-socket "$socket" -X POST -G --data-urlencode "fromImage=$FROM_IMAGE" \
    --data-urlencode "tag=$TAG" http://localhost/images/create | relay
  status=("${PIPESTATUS[@]}")
  [ "${status[0]}" -eq 0 ] && [ "${status[1]}" -eq 0 ]
else
  # not `exec`: a host unit runs this script inline and records its success after it (runner/early.py)
  docker pull -- "$IMAGE"
fi

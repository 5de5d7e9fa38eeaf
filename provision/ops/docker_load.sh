#!/bin/sh
# docker load of ARCHIVE, with progress: `docker load` prints progress bars only on a terminal (docker/cli
# cli/command/image/load.go: `if !dockerCli.Out().IsTerminal() { opts.quiet = true }`), so the bytes
# the docker CLI has read of the archive (it opens `--input` itself; its file offset, /proc/PID/fdinfo
# "pos:") are printed every second while it streams the archive to the daemon, as "loaded=BYTES"
# after "size=BYTES".
# Environment: ARCHIVE (the `docker save` file on this host).
set -eu
: "${ARCHIVE:?}"
archive=$(readlink -f -- "$ARCHIVE")  # as /proc/PID/fd names it
echo "size=$(stat -c %s -- "$archive")"
docker load --quiet --input "$archive" &
pid=$!
while kill -0 "$pid" 2>/dev/null; do
  for fd in /proc/"$pid"/fd/*; do
    if [ "$(readlink -- "$fd" 2>/dev/null)" = "$archive" ]; then
      sed -n 's/^pos:[[:space:]]*/loaded=/p' /proc/"$pid"/fdinfo/"${fd##*/}" 2>/dev/null || true
    fi
  done
  sleep 1
done
wait "$pid"

#!/bin/bash
# Install what the test lab (and the unit tests: shellcheck) need on a Debian 12 machine, and make
# sure dockerd runs.
# Idempotent: installs only missing packages; starts dockerd only if `docker info` fails.
set -euo pipefail
packages=(debootstrap slirp4netns docker.io docker-registry busybox-static openssh-client zstd
          iptables util-linux dpkg-dev gnupg shellcheck
          chromium   # the status page is tested as a person sees it: drawn in headless Chromium
          haproxy socat)  # the office gateway and its status page, run for real by the unit tests
missing=()
for package in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q 'install ok installed' || missing+=("$package")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  apt-get update -q
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}"
fi
# systemd in every lab host takes inotify instances: at the default 128 per user, 20-odd hosts (or
# two labs) make a new host's systemd fail at boot ("Too many open files"), its SSH never answering.
raise_sysctl() {
  local current
  current=$(sysctl -n "$1")
  if [ "$current" -lt "$2" ]; then sysctl -q -w "$1=$2"; fi
}
raise_sysctl fs.inotify.max_user_instances 1024
raise_sysctl fs.inotify.max_user_watches 524288
if ! docker info >/dev/null 2>&1; then
  # no systemd on CI machines: start dockerd by hand, in its own session so it outlives this script
  echo "starting dockerd (log: /var/log/dockerd.log)"
  # fds 3-9 closed: run under `flock LOCK cmd`, the lock's fd is inherited, and a daemon holding it
  # keeps the lab lock taken for its whole life (flock(1): the lock belongs to the open file)
  setsid dockerd >/var/log/dockerd.log 2>&1 </dev/null 3>&- 4>&- 5>&- 6>&- 7>&- 8>&- 9>&- &
  for _ in $(seq 1 100); do docker info >/dev/null 2>&1 && break; sleep 0.2; done
  docker info >/dev/null 2>&1 || { echo "dockerd did not start; see /var/log/dockerd.log" >&2; exit 1; }
fi
echo "lab host packages ok; dockerd up"

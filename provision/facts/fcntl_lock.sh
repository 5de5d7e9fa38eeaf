# shellcheck shell=bash
# fcntl_lock_pid FILE: print the pid of the process holding an fcntl(2) lock on FILE, nothing when
# none does; fail when FILE cannot be stat'ed. dpkg and apt take fcntl (POSIX) locks, which
# `flock -n` cannot see; /proc/locks lists them as PID MAJOR:MINOR:INODE (major and minor in hex,
# the inode decimal; proc(5)). Shared by the facts probe (`dpkg_locked`) and the apt operation's
# wait (provision/ops/dpkg_lock.sh), so both read the lock the same way.
fcntl_lock_pid() {
  local st dev key
  st=$(stat -c '%d %i' "$1" 2>/dev/null) && [ -n "$st" ] || return 1
  dev=${st% *}
  key=$(printf '%02x:%02x:%s' $(( ((dev >> 8) & 0xfff) | ((dev >> 32) & 0xfffff000) )) \
    $(( (dev & 0xff) | ((dev >> 12) & 0xffffff00) )) "${st#* }")
  awk -v key="$key" '{ for (i = 2; i <= NF; i++) if ($i == key) { print $(i - 1); exit } }' /proc/locks 2>/dev/null
}

# shellcheck shell=bash
# wait_dpkg_lock TIMEOUT: wait (bounded) while a process holds a dpkg/apt lock, printing
# `dpkg_lock=SECONDS_WAITED<TAB>PID<TAB>COMMAND LINE` every 5 s (the apt operation shows it as
# progress); past TIMEOUT, fail naming the holder (pid, process name, command line). dpkg and apt
# take fcntl(2) locks; fcntl_lock_pid (provision/facts/fcntl_lock.sh, sent before this) names the holder.
# Used by the apt operation before each apt-get and by the preflight role ("the dpkg lock is free").
dpkg_lock_holder() {
  local lock pid
  local locks="/var/lib/dpkg/lock-frontend /var/lib/dpkg/lock /var/lib/apt/lists/lock /var/cache/apt/archives/lock"
  for lock in ${DPKG_LOCK_FILES:-$locks}; do
    [ -e "$lock" ] || continue
    pid=$(fcntl_lock_pid "$lock") || continue
    if [ -n "$pid" ] && [ "$pid" != "$$" ]; then
      printf '%s\t%s\n' "$pid" "$(tr '\0\n' '  ' < "/proc/$pid/cmdline" 2>/dev/null | cut -c1-200 || echo unknown)"
      return 0
    fi
  done
}
wait_dpkg_lock() {
  local timeout=$1 started=$SECONDS holder pid
  while holder=$(dpkg_lock_holder); [ -n "$holder" ]; do
    if [ $((SECONDS - started)) -ge "$timeout" ]; then
      pid=${holder%%$'\t'*}
      echo "the dpkg lock is still held by process $pid ($(cat "/proc/$pid/comm" 2>/dev/null || echo gone))" \
        "after ${timeout}s: ${holder#*$'\t'}; wait for it to finish (or stop it) and run again" >&2
      return 1
    fi
    printf 'dpkg_lock=%s\t%s\n' "$((SECONDS - started))" "$holder"
    sleep 5
  done
}

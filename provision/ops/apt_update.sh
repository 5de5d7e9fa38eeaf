# shellcheck shell=bash
# apt_update_watched STALL_SECONDS ATTEMPTS APT_GET...: `APT_GET... update`, stopped and run again (up to
# ATTEMPTS runs in all) when it has written nothing under apt's lists and cache folders for STALL_SECONDS;
# prints `apt_update_stalled=SECONDS<TAB>ATTEMPT<TAB>ATTEMPTS` before each new run (the apt operation
# shows it as progress). Why: apt 2.6.1 behind apt-cacher-ng 3.7.4 was seen waiting forever, its http
# method idle on its stdin while apt-get waited on the method, after apt-cacher-ng failed a concurrent
# refresh of an InRelease file ("Failure to move file ... out of the way ... errno: File exists"):
# apt's own Acquire::http::Timeout covers a connection that goes quiet (60 s seen), not this.
# A stopped update is safe to run again: apt keeps what it fetched in lists/partial and resumes it.
# Written for `set -euo pipefail` (every script the tool sends runs under it).
# APT_UPDATE_WATCH (folders, space-separated) replaces the folders watched, for tests.
apt_update_watched() {
  local stall=$1 attempts=$2 attempt=1 stamp pid quiet tick rc
  shift 2
  stamp=$(mktemp) || return 1
  while :; do
    touch "$stamp"
    "$@" update &
    pid=$!
    quiet=0 tick=0
    # its end seen within 0.2 s (an update of fresh lists takes about a second); the folders looked at each second
    while kill -0 "$pid" 2>/dev/null && [ "$quiet" -lt "$stall" ]; do
      sleep 0.2
      tick=$((tick + 1))
      [ $((tick % 5)) -eq 0 ] || continue
      # shellcheck disable=SC2086 # the folders are words
      if [ -n "$(find ${APT_UPDATE_WATCH:-/var/lib/apt/lists /var/cache/apt} -newer "$stamp" -print -quit 2>/dev/null)" ]
      then
        touch "$stamp"
        quiet=0
      else
        quiet=$((quiet + 1))
      fi
    done
    if ! kill -0 "$pid" 2>/dev/null; then  # ended, even in the second its quiet time ran out: its own status
      rc=0
      wait "$pid" || rc=$?
      rm -f -- "$stamp"
      return "$rc"
    fi
    pkill -TERM -P "$pid" 2>/dev/null || true
    kill -TERM "$pid" 2>/dev/null || true
    for _ in 1 2 3 4 5 6 7 8 9 10; do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.2
    done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    if [ "$attempt" -ge "$attempts" ]; then
      rm -f -- "$stamp"
      echo "apt-get update wrote nothing for ${stall}s, ${attempts} times: stopped each time; its output is above." \
        "Check the mirror or proxy apt uses (apt-config dump | grep -i proxy) and run again" >&2
      return 1
    fi
    attempt=$((attempt + 1))
    printf 'apt_update_stalled=%s\t%s\t%s\n' "$stall" "$attempt" "$attempts"
  done
}

#!/usr/bin/env bash
# provision's run lock on this host: one run at a time (provision/runner/run_lock.py reads what this
# prints). The lock is flock(2) on $LOCK_DIR/run.lock, held by this shell for as long as the run's
# controller keeps this session open: the shell writes a beat every second to the controller, and
# the first write after the controller is gone fails (EPIPE), so the kernel drops the lock with the
# shell. A holder can only outlive its controller while the network is silent; then a run from the
# same controller machine may end it once it has proved the holder's controller process gone.
# Env: LOCK_DIR, HOLDER (this run, one JSON object without its closing brace), GRACE_S (how long a
# held lock is waited for before answering "held"), BREAK_PID (a holder shell proven orphaned),
# STOP_GUARD (an upgrade guard's unit holding the lock: this run takes over from it, vllm/guard.sh).
# run_lock.py may put the run's first probe batch after the `lock=taken` line: it runs under the lock,
# on this channel, before the beat starts. Comment lines are not sent (run_lock.py `lock_script`).
set -euo pipefail
# (builtins where they do: this runs on every host at the start of every run)
[ -d "$LOCK_DIR" ] || mkdir -p -- "$LOCK_DIR"
lock="$LOCK_DIR/run.lock"
holder="$LOCK_DIR/run.holder.json"
exec 9>>"$lock"
if ! flock -w "${GRACE_S:-2}" 9; then
  if [ -n "${BREAK_PID:-}" ] && grep -q "\"lock_pid\": ${BREAK_PID}}" "$holder" 2>/dev/null; then
    kill -- "$BREAK_PID" 2>/dev/null || true
    flock -w 10 9 || { echo "lock=held"; echo "holder=$(base64 -w0 < "$holder" 2>/dev/null || true)"; exit 0; }
  elif [ -n "${STOP_GUARD:-}" ] && grep -qF "\"guard_unit\": \"${STOP_GUARD}\"" "$holder" 2>/dev/null; then
    systemctl stop -- "$STOP_GUARD" 2>/dev/null || true
    flock -w 30 9 || { echo "lock=held"; echo "holder=$(base64 -w0 < "$holder" 2>/dev/null || true)"; exit 0; }
  else
    echo "lock=held"
    echo "holder=$(base64 -w0 < "$holder" 2>/dev/null || true)"
    exit 0
  fi
fi
# 0600: only root reads who holds the lock. Written in place under the lock (a fresh file and `mv`
# cost the host a process in every run): a new record is made 0600 by the umask (in this shell, not
# a subshell: a fork), and one kept keeps its mode; an older record (0644, from before) is made 0600
# once, which the marker file remembers. A reader reads it only after the lock was held from it for
# GRACE_S: at worst it finds it empty (then the run is refused naming no holder).
umask 077
[ -e "$LOCK_DIR/run.holder.0600" ] || { [ ! -e "$holder" ] || chmod 600 -- "$holder"; : > "$LOCK_DIR/run.holder.0600"; }
printf '%s, "lock_pid": %s}\n' "${HOLDER:?set by run_lock.py: this run as JSON}" "$$" > "$holder"
echo "lock=taken"
# the beat: the controller's watchdog reads it (a silent host is reported unreachable), and the
# write that fails once the controller is gone ends this shell and with it the lock. Between beats
# the shell waits on stdin, the controller's side of the session: end of file there (the run let go)
# ends it at once, so the next run finds the lock free instead of waiting for the next beat.
while echo beat; do
  read -r -t 1 _ || [ $? -gt 128 ] || exit 0
done

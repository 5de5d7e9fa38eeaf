#!/usr/bin/env bash
# The upgrade guard: a transient systemd unit (systemd-run) that the controller starts on the host
# before an upgrade's swap, so that a controller killed or cut off mid-swap still leaves a serving
# endpoint. While the run that armed it holds the run lock, the guard only waits. When the armed
# file goes (the controller recorded the outcome) it exits. When the run's lock is released while
# still armed (the controller is gone), it takes the run lock (a new run waits) and decides: the new
# release serves (health 200 within READY_TIMEOUT) -> record.pass.json; otherwise the previous
# release's files go back, it is started, and record.fail.json says why. The next run reads the
# record (release.py) and reports what happened.
# Env: GUARD_DIR (armed, record.pass.json, record.fail.json), RECORD, LOCK, UNIT, UNIT_PATH,
# NEW_UNIT_SHA, HEALTH_URL, READY_TIMEOUT, GIVE_UP_S, PREVIOUS_DIR, ENV_PATH, KEY_PATH.
set -uo pipefail
armed="$GUARD_DIR/armed"
started=$SECONDS
exec 9>>"$LOCK"
# wait while the controller's run holds the lock (it beats every second)
while [ -e "$armed" ]; do
  if flock -n 9; then break; fi
  if [ $((SECONDS - started)) -ge "$GIVE_UP_S" ]; then break; fi  # a controller silent this long
  sleep 1
done
[ -e "$armed" ] || exit 0
printf '{"controller_host": "%s (upgrade guard)", "controller_pid": %s, "started": "%s", "command": "upgrade guard of %s"}\n' \
  "$(hostname)" "$$" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$UNIT" > "$(dirname "$LOCK")/run.holder.json"
healthy() { [ "$(curl -s -o /dev/null -m 5 -w '%{http_code}' "$HEALTH_URL")" = 200 ]; }
live=$(sha256sum < "$UNIT_PATH" | cut -d' ' -f1)
if [ "$live" = "$NEW_UNIT_SHA" ]; then
  deadline=$((SECONDS + READY_TIMEOUT))
  while [ "$SECONDS" -lt "$deadline" ]; do
    if healthy; then
      mv -f -- "$GUARD_DIR/record.pass.json" "$RECORD"
      rm -f -- "$armed"
      echo "the controller went away during the upgrade; the new release serves: kept"
      exit 0
    fi
    systemctl is-failed --quiet -- "$UNIT" && break
    sleep 2
  done
fi
if [ -n "$PREVIOUS_DIR" ] && [ -f "$PREVIOUS_DIR/unit" ]; then
  systemctl stop -- "$UNIT" 2>/dev/null || true
  cp -f -- "$PREVIOUS_DIR/unit" "$UNIT_PATH.guard" && mv -f -- "$UNIT_PATH.guard" "$UNIT_PATH"
  (umask 077; cp -f -- "$PREVIOUS_DIR/env" "$ENV_PATH.guard" && mv -f -- "$ENV_PATH.guard" "$ENV_PATH")
  if [ -s "$PREVIOUS_DIR/key" ]; then
    (umask 077; cp -f -- "$PREVIOUS_DIR/key" "$KEY_PATH.guard" && mv -f -- "$KEY_PATH.guard" "$KEY_PATH")
  fi
  systemctl daemon-reload
  systemctl reset-failed -- "$UNIT" 2>/dev/null || true
  systemctl start -- "$UNIT"
  echo "the controller went away during the upgrade; the previous release was restored"
else
  systemctl stop -- "$UNIT" 2>/dev/null || true
  echo "the controller went away during the first release, which did not become healthy: stopped"
fi
mv -f -- "$GUARD_DIR/record.fail.json" "$RECORD"
rm -f -- "$armed"

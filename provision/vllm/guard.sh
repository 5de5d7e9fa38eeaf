#!/usr/bin/env bash
# The upgrade guard: a transient systemd unit (systemd-run) that the controller starts on the host
# before an upgrade's swap, so that a controller killed or cut off mid-swap still leaves a serving
# endpoint. While the run that armed it holds the run lock, the guard only waits. When the armed
# file goes (the controller recorded the outcome) it exits. When the run's lock is released while
# still armed (the controller is gone), it takes the run lock (a new run waits) and decides: the new
# release serves (health 200 within READY_TIMEOUT, then the run's own text and vision smoke checks:
# smoke.sh sends them, smoke_judge.py judges them as the controller would) -> record.pass.json;
# otherwise the previous release's files go back, it is started, and record.fail.json says why.
# The next run reads the record (release.py) and reports what happened. Without python3 on the host
# the smoke answers cannot be judged: /health alone decides, and the record says so.
# Env: GUARD_DIR (armed, record.pass.json, record.fail.json, smoke.sh, smoke.requests,
# smoke_judge.py), RECORD, LOCK, UNIT, UNIT_PATH, NEW_UNIT_SHA, HEALTH_URL, READY_TIMEOUT, GIVE_UP_S,
# PREVIOUS_DIR, ENV_PATH, KEY_PATH, SMOKE_VISION (1: the vision check too).
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
# record.*.json carry a placeholder for how/why; what goes in must not break JSON or sed
fill() {  # file placeholder text
  local text
  text=$(printf '%s' "$3" | tr '\n' ' ' | tr -d '"\\&|' | tr -s ' ' | cut -c1-600)
  sed -i "s|$2|$text|" -- "$1"
}
smoke_passes() {  # sets $why
  if ! command -v python3 >/dev/null 2>&1; then
    why="it became healthy; no python3 on this host to judge the smoke checks: /health alone decided"
    return 0
  fi
  why=$(bash "$GUARD_DIR/smoke.sh" 3<"$GUARD_DIR/smoke.requests" \
        | python3 "$GUARD_DIR/smoke_judge.py" ${SMOKE_VISION:+--vision} 2>&1)
}
why="the new release did not answer /health within ${READY_TIMEOUT}s"
live=$(sha256sum < "$UNIT_PATH" | cut -d' ' -f1)
if [ "$live" = "$NEW_UNIT_SHA" ]; then
  deadline=$((SECONDS + READY_TIMEOUT))
  while [ "$SECONDS" -lt "$deadline" ]; do
    if healthy; then
      if smoke_passes; then
        fill "$GUARD_DIR/record.pass.json" @GUARD_HOW@ "it became healthy and passed the smoke checks: $why"
        mv -f -- "$GUARD_DIR/record.pass.json" "$RECORD"
        rm -f -- "$armed"
        echo "the controller went away during the upgrade; the new release serves and passed the smoke checks: kept"
        exit 0
      fi
      echo "the new release answers /health but failed: $why"
      break
    fi
    if systemctl is-failed --quiet -- "$UNIT"; then why="the new release's service failed"; break; fi
    sleep 2
  done
else
  why="the unit on disk is not the new release's"
fi
fill "$GUARD_DIR/record.fail.json" @GUARD_WHY@ "$why"
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

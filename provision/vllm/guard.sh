#!/usr/bin/env bash
# The upgrade guard: a transient systemd unit (systemd-run) that the controller starts on the host
# before an upgrade's swap, so that a controller killed or cut off mid-swap still leaves a serving
# endpoint. While the run that armed it holds the run lock, the guard only waits. When the armed
# file goes (the controller recorded the outcome) it exits. When the run's lock is released while
# still armed (the controller is gone), it takes the run lock and first looks at where the swap was
# cut off: before it stopped the previous release (still serving: left alone, the new one "never
# started"), after the stop but before the new unit was in place (the previous release is restored
# at once), or with the new unit in place but not started (the swap is finished from the staged
# release: its files, daemon-reload, enable, start). A new release that runs is then judged: it
# serves (health 200 within READY_TIMEOUT, then the run's own text and vision smoke checks: smoke.sh
# sends them, smoke_judge.py judges them as the controller would) -> record.pass.json; otherwise the
# previous release's files go back, it is started, and record.fail.json says why. A new run takes
# over from the guard (run_lock.sh stops this unit, named in the holder record): it redoes the upgrade.
# The next run reads the record (release.py) and reports what happened. Without python3 on the host
# the smoke answers cannot be judged: /health alone decides, and the record says so.
# Env: GUARD_DIR (armed, record.pass.json, record.fail.json, smoke.sh, smoke.requests,
# smoke_judge.py), GUARD_UNIT (this unit), RECORD, LOCK, UNIT, UNIT_PATH, NEW_UNIT_SHA, HEALTH_URL,
# READY_TIMEOUT, GIVE_UP_S, NEW_DIR, PREVIOUS_DIR, ENV_PATH, KEY_PATH, SMOKE_VISION (1: vision too).
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
# the holder record is root's to read (run_lock.sh), made 0600 if it is new
(umask 077; printf '{"controller_host": "%s (upgrade guard)", "controller_pid": %s, "started": "%s", "command": "upgrade guard of %s", "guard_unit": "%s"}\n' \
  "$(hostname)" "$$" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$UNIT" "$GUARD_UNIT" > "$(dirname "$LOCK")/run.holder.json")
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
# make_live DIR: a release's files (unit, env, key) made live, as activate_script does (release.py)
make_live() {
  cp -f -- "$1/unit" "$UNIT_PATH.guard" && mv -f -- "$UNIT_PATH.guard" "$UNIT_PATH"
  (umask 077; cp -f -- "$1/env" "$ENV_PATH.guard" && mv -f -- "$ENV_PATH.guard" "$ENV_PATH")
  if [ -s "$1/key" ]; then
    (umask 077; cp -f -- "$1/key" "$KEY_PATH.guard" && mv -f -- "$KEY_PATH.guard" "$KEY_PATH")
  fi
  systemctl daemon-reload
  systemctl reset-failed -- "$UNIT" 2>/dev/null || true
}
sha() { sha256sum < "$1" 2>/dev/null | cut -d' ' -f1; }
why="the new release did not answer /health within ${READY_TIMEOUT}s"
how=""
live=$(sha "$UNIT_PATH")
state=$(systemctl is-active -- "$UNIT" 2>/dev/null)
keep_previous=""
if [ "$live" != "$NEW_UNIT_SHA" ] && [ "$state" = active ] && [ -n "$PREVIOUS_DIR" ] \
    && [ "$live" = "$(sha "$PREVIOUS_DIR/unit")" ]; then
  why="the new release never started: the run was cut off before the swap stopped the previous release, which kept serving"
  keep_previous=1
elif [ "$live" != "$NEW_UNIT_SHA" ]; then
  why="the new release never started: the run was cut off during the swap, before the new unit was in place"
elif [ "$state" = inactive ]; then
  # the swap was cut off after the stop, before the start: finish it from the staged files
  if [ -f "$NEW_DIR/unit" ] && [ -f "$NEW_DIR/env" ] && [ "$(sha "$NEW_DIR/unit")" = "$NEW_UNIT_SHA" ]; then
    make_live "$NEW_DIR"
    systemctl enable --quiet -- "$UNIT" 2>/dev/null || true
    systemctl start --no-block -- "$UNIT"
    how="the run was cut off before the new release started; the guard started it. "
    echo "the controller went away before the new release started: the guard finished the swap"
  else
    why="the new release never started: the run was cut off during the swap, before its files were staged"
    live=""
  fi
fi
if [ "$live" = "$NEW_UNIT_SHA" ]; then
  deadline=$((SECONDS + READY_TIMEOUT))
  while [ "$SECONDS" -lt "$deadline" ]; do
    if healthy; then
      if smoke_passes; then
        fill "$GUARD_DIR/record.pass.json" @GUARD_HOW@ "${how}it became healthy and passed the smoke checks: $why"
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
  [ -z "$how" ] || case "$why" in "$how"*) ;; *) why="$how$why" ;; esac
fi
fill "$GUARD_DIR/record.fail.json" @GUARD_WHY@ "$why"
did=restored
[ -z "$keep_previous" ] || did="left serving"
fill "$GUARD_DIR/record.fail.json" @GUARD_DID@ "$did"
if [ -n "$keep_previous" ]; then
  echo "the controller went away before the swap; the previous release still serves"
elif [ -n "$PREVIOUS_DIR" ] && [ -f "$PREVIOUS_DIR/unit" ]; then
  systemctl stop -- "$UNIT" 2>/dev/null || true
  make_live "$PREVIOUS_DIR"
  systemctl start -- "$UNIT"
  echo "the controller went away during the upgrade; the previous release was restored"
else
  systemctl stop -- "$UNIT" 2>/dev/null || true
  echo "the controller went away during the first release, which did not become healthy: stopped"
fi
mv -f -- "$GUARD_DIR/record.fail.json" "$RECORD"
rm -f -- "$armed"

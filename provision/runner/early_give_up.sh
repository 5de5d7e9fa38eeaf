# shellcheck shell=bash
# What ends a host unit started early (provision/runner/early.py) once systemd has given up on it: the
# unit's `OnFailure=` starts `provision-give-up@UNIT.service`, which runs this as
# `bash early_give_up.sh UNIT PERMANENT_FAILURE`. systemd gives up when the unit's command exited with
# the status no retry mends (`RestartPreventExitStatus=`), or when it failed more often than its start
# limit allows (Result `start-limit-hit`). Then nothing of the unit may start again, at a boot either,
# and its script, which may hold the hub's token, goes: the unit is disabled, its file and script are
# removed, and a record (`failed`: when, the result, the exit status) stays beside its output logs for
# the next `provision up` to report. A stop (a run that restarts the unit, the host shutting down) also
# leaves the unit failed (its script exits 143 on SIGTERM); that is no end, and changes nothing here.
set -u
unit=$1
permanent=$2
folder=/var/lib/provision/early/$unit
service=$unit.service
result=$(systemctl show -p Result --value -- "$service")
status=$(systemctl show -p ExecMainStatus --value -- "$service")
if [ "$status" != "$permanent" ] && [ "$result" != start-limit-hit ]; then
  exit 0
fi
systemctl disable --quiet -- "$service" 2>/dev/null || true
rm -f -- "/etc/systemd/system/$service" "$folder/run.sh"
systemctl daemon-reload
if [ -d "$folder" ]; then
  printf '%s %s %s\n' "$(date +%s)" "$result" "$status" > "$folder/failed"
fi
echo "$service ended for good ($result, exit status $status): $(tail -n 1 -- "$folder/err.log" 2>/dev/null)"

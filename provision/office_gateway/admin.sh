#!/bin/bash
# The office gateway's runtime API (HAProxy's admin socket, https://docs.haproxy.org/2.6/management.html#9.3),
# run as root on the gateway host. Prints `show stat` (CSV) after the action, so the controller shows
# the gateway's view.
#   admin.sh SOCKET show
#   admin.sh SOCKET drain SERVER WAIT_S   no new requests to vllm/SERVER; wait up to WAIT_S for those in flight
#   admin.sh SOCKET ready SERVER          back into rotation (it still must pass its health checks)
set -euo pipefail
socket=$1 action=$2
api() { printf '%s\n' "$1" | socat -t 10 stdio "UNIX-CONNECT:$socket"; }
in_flight() {  # the server's current sessions (show stat field 5, scur)
  api "show stat" | awk -F, -v server="$1" '$1 == "vllm" && $2 == server { print $5 }'
}
if [ "$action" != show ]; then
  server=$3
  answer=$(api "set server vllm/$server state $action")
  # the runtime API answers nothing on success, its reason otherwise ("No such server.")
  if [ -n "$answer" ]; then
    echo "the gateway refused 'set server vllm/$server state $action': $answer" >&2
    exit 1
  fi
  if [ "$action" = drain ]; then
    # With office_session_header, HAProxy's drain still lets in the sessions stuck to the server ("it
    # will not accept any new connections other than those that are accepted via persistence",
    # https://docs.haproxy.org/2.6/management.html#9.3 set server): forget them, so they go elsewhere.
    # Without stickiness there is no such table: the answer ("No such table") is not an error here.
    sid=$(api "show stat" | awk -F, -v server="$server" '$1 == "vllm" && $2 == server { print $29 }')  # field 29: sid
    api "clear table vllm data.server_id eq $sid" >/dev/null
    deadline=$((SECONDS + $4))
    while [ "$(in_flight "$server")" != 0 ] && [ "$SECONDS" -lt "$deadline" ]; do sleep 0.2; done
    echo "in_flight=$(in_flight "$server")"
  fi
fi
# requests per office user (roles/office_gateway: the table exists only with office_users)
echo "--- show table office_users"
api "show table office_users"
echo "--- show stat"
api "show stat"

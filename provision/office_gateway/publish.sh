#!/bin/bash
# The office status page published on the gateway host (run as root by `provision up`, after its
# run): written only when it changed; then HAProxy, which reads the file when it loads its config,
# checks the config with the new page and reloads (a reload, never a restart: roles/office_gateway/
# handlers.yaml). A page HAProxy refuses (larger than its buffer) is taken back and the reason told.
#   publish.sh PAGE CONFIG BASE64_CONTENT
set -euo pipefail
page=$1 config=$2 content=$3
mkdir -p "${page%/*}"
new=$(mktemp "$page.provision-XXXXXX")
old=$(mktemp "$page.provision-XXXXXX")
trap 'rm -f "$new" "$old"' EXIT
printf '%s' "$content" | base64 -d > "$new"
# The line that says when `up` read the office cache's figures is left out of the comparison: a page
# whose figures are the same is the same page (provision/status_page/page.py, cache_cards).
if [ -f "$page" ] && cmp -s <(grep -v 'data-read-at=' "$new") <(grep -v 'data-read-at=' "$page"); then
  echo "status page unchanged"
  exit 0
fi
chmod 0644 "$new"
had_page=0
if [ -f "$page" ]; then cp -p "$page" "$old" && had_page=1; fi
mv -f "$new" "$page"
if ! checked=$(haproxy -c -f "$config" 2>&1); then
  checked=$(printf '%s\n' "$checked" | grep ALERT || printf '%s' "$checked")
  if [ "$had_page" = 1 ]; then mv -f "$old" "$page"; else rm -f "$page"; fi
  echo "haproxy refuses its config with the new status page (the old one is kept): $checked" >&2
  exit 1
fi
if systemctl is-active --quiet haproxy; then systemctl reload haproxy; fi
echo "status page written"

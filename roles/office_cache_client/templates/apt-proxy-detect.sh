#!/bin/bash
# apt's Acquire::http::Proxy-Auto-Detect program (apt.conf(5)): print the office cache's apt proxy when
# it answers, else DIRECT, so apt fetches from the origin itself while the cache is down.
# Managed by provision (roles/office_cache_client); the proxy is Provision::OfficeCache::Proxy in
# /etc/apt/apt.conf.d/01provision-office-cache.
proxy=""
eval "$(apt-config shell proxy Provision::OfficeCache::Proxy)"
address=${proxy#http://}
address=${address%%/*}
# shellcheck disable=SC2016 # $0 and $1 are the inner bash's arguments, expanded there
if [ -n "$proxy" ] && timeout 2 bash -c 'exec 3<>"/dev/tcp/$0/$1"' "${address%:*}" "${address##*:}" 2>/dev/null; then
  echo "$proxy"
else
  echo DIRECT
fi

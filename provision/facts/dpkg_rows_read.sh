# shellcheck shell=bash
# dpkg_rows_read CACHE PATTERN...: the probe batch's one read of dpkg's database (provision/facts/
# dpkg_rows.py), its rows (dpkg-query -W's, as dpkg_rows.sh reads them) left in _dpkg_rows. dpkg-query
# parses the whole status database each time (~4 ms of a lab host's CPU, the largest part of a
# converged apt probe); the rows are kept in CACHE and read back while the database is as it was.
# Kept as the dpkg status grep's stamps are (provision/ops/apt.py): CACHE.checked is stamped with a
# token before dpkg-query reads, CACHE written (renamed into place) after the read with the patterns
# and the token. Read back only while CACHE.checked is newer than the status file, the journal's folder
# and dpkg's own (dpkg folds its journal into a status file it writes anew and renames into place, so
# each changes with any install; a status file renamed in by hand changes the folder too),
# CACHE not older than the stamp, and both carry the same token and CACHE the same patterns: a probe
# killed before its write, or a second probe that stamped in between (its read may be older than the
# first's stamp), leaves them apart, and the next probe reads dpkg again. Equal times (writes within
# one clock tick) are not newer: read again. Written in --check too, as those stamps are. No CACHE's
# folder: dpkg-query every time.
# DPKG_ADMINDIR, as dpkg-query itself reads it (dpkg-query(1)), names another database.
dpkg_rows_read() {
  local cache=$1 dpkg=${DPKG_ADMINDIR:-/var/lib/dpkg} key token='' line='' kept=''
  shift
  key="patterns $*"
  if [ "$cache.checked" -nt "$dpkg/status" ] && [ "$cache.checked" -nt "$dpkg/updates" ] \
    && [ "$cache.checked" -nt "$dpkg" ] && [ -f "$cache" ] \
    && ! [ "$cache.checked" -nt "$cache" ] && IFS= read -r token < "$cache.checked" && [ -n "$token" ]; then
    IFS= read -r -d '' kept < "$cache"
    line=${kept#*$'\n'}
    if [ "${kept%%$'\n'*}" = "$key" ] && [ "${line%%$'\n'*}" = "token $token" ]; then
      _dpkg_rows=${line#*$'\n'}
      _dpkg_rows=${_dpkg_rows%$'\n'}
      return 0
    fi
  fi
  token=''
  if [ -d "${cache%/*}" ]; then
    token="$BASHPID.${EPOCHREALTIME:-$RANDOM$RANDOM}"
    printf '%s\n' "$token" > "$cache.checked" 2>/dev/null || token=''
  fi
  # shellcheck disable=SC2016 # dpkg-query's own ${field} format, not a shell expansion
  _dpkg_rows=$(dpkg-query -W -f='${db:Status-Abbrev}\t${Package}\t${Version}\n' -- "$@" 2>/dev/null)
  [ -n "$token" ] || return 0
  # a temporary file left by a probe killed before its rename (the glob costs no fork when none is left)
  for line in "$cache".[0-9]*; do [ -e "$line" ] && rm -f -- "$cache".[0-9]*; break; done
  if ! { printf '%s\ntoken %s\n%s\n' "$key" "$token" "$_dpkg_rows" > "$cache.$BASHPID" \
    && mv -f -- "$cache.$BASHPID" "$cache"; } 2>/dev/null; then
    rm -f -- "$cache.$BASHPID" 2>/dev/null
  fi
  return 0
}

# shellcheck shell=bash
# dpkg_rows FORMAT PATTERN...: the packages dpkg knows that match a PATTERN (dpkg-query -W's own
# patterns), one line each in dpkg's order, as FORMAT says: `facts` "STATUS-ABBREV PACKAGE VERSION"
# printed, `apt` "PACKAGE<TAB>VERSION<TAB>STATUS-ABBREV" left in dpkg_rows_out (no command
# substitution: a fork less). Shared by the facts probe's packages section and the
# apt operation's probe. In the probe batch (provision/runner/probe.py) one dpkg-query for every
# call's patterns runs before the snippets start and leaves its rows in _dpkg_rows, the patterns it
# read in _dpkg_rows_for: a call whose patterns it read all picks its rows from there in bash
# (dpkg-query parses the whole status database: ~4 ms of the host's CPU each); any other asks
# dpkg-query itself.
dpkg_rows() {
  local format=$1 memo=1 pattern status package version rows matched
  shift
  dpkg_rows_out=''
  for pattern; do case ${_dpkg_rows_for:-} in *" $pattern "*) ;; *) memo='' ;; esac; done
  if [ -n "$memo" ]; then
    rows=${_dpkg_rows:-}
  else
    command -v dpkg-query >/dev/null 2>&1 || return 0
    # shellcheck disable=SC2016 # dpkg-query's own ${field} format, not a shell expansion
    rows=$(dpkg-query -W -f='${db:Status-Abbrev}\t${Package}\t${Version}\n' -- "$@" 2>/dev/null)
  fi
  [ -n "$rows" ] || return 0
  while IFS=$'\t' read -r status package version; do
    matched=${memo:+no}
    if [ -n "$matched" ]; then
      # shellcheck disable=SC2254 # a glob on purpose: the rows of the patterns of this call only
      for pattern; do case $package in $pattern) matched=''; break ;; esac; done
    fi
    [ -z "$matched" ] || continue
    if [ "$format" = facts ]; then printf '%s %s %s\n' "$status" "$package" "$version"
    else dpkg_rows_out+="$package"$'\t'"$version"$'\t'"$status"$'\n'; fi
  done <<<"$rows"
}

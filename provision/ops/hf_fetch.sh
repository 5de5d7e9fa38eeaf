# shellcheck shell=bash
# shellcheck disable=SC2154  # the globals are set by the script hf_snapshot.py writes around these
# Functions of hf_snapshot's download script (provision/ops/hf_snapshot.py writes the globals and the
# calls): each file of the repository into "$storage/blobs/ETAG.part", checked, then renamed into place.
# Globals: storage manifests attempts connections parallel_files wanted (ETAG:SIZE of the files still
# missing) done_bytes (bytes already in place), for_good (the exit status of a failure no retry mends:
# provision/shell.py::PERMANENT_FAILURE), and the function `auth` (curl's header config).
#
# A failure is for good when the hub refused the file (an HTTP 4xx status but 408 Request Timeout and
# 429 Too Many Requests, which say to come back later: RFC 9110 section 15.5, RFC 6585 section 4), a
# bundle's file:// copy lacks it (curl exit 37), or every attempt got the whole file and it is not the
# file the hub lists (size or hash): the script exits with $for_good, which the host unit an early start
# runs it in does not restart on (provision/runner/early.py). Anything else (no connection, a 5xx, a
# full disk) exits 1: a later start resumes.
#
# A large file comes by several ranged requests at once, each chunk written at its offset of the
# .part (the way hf_transfer fills a file: github.com/huggingface/hf_transfer, src/lib.rs, download
# with max_files and chunk_size), a marker per finished chunk beside the cache, so an interrupted
# download resumes with the chunks it lacks. Several files run at once (huggingface_hub's
# snapshot_download does the same with max_workers=8 threads, one per file).

refused() {  # curl-exit http-status: the server's answer says a retry cannot mend it
  case "$2" in
    408 | 429) return 1 ;;
    4[0-9][0-9]) return 0 ;;
  esac
  [ "$1" = 37 ]
}

no_space() {  # path needed what
  local fs free
  fs=$(df -P -- "$1" | awk 'NR == 2 { print $1 " mounted on " $6 }')
  free=$(df -PB1 -- "$1" | awk 'NR == 2 { print $4 }')
  if [ "$free" -ge "$2" ]; then return 1; fi
  echo "not enough disk space for $3 in $1 (filesystem $fs): $free bytes free, $2 bytes needed" >&2
}

held() {  # path size: the bytes a .part holds (its allocated blocks, at most its length and size)
  local blocks unit length
  read -r blocks unit length < <(stat -c '%b %B %s' -- "$1" 2>/dev/null || echo "0 0 0")
  blocks=$((blocks * unit))
  [ "$blocks" -lt "$length" ] && length=$blocks
  [ "$length" -lt "$2" ] && echo "$length" || echo "$2"
}

checked() {  # etag size kind part path: the .part has the listed size and hash
  local got sum
  got=$(stat -c %s -- "$4" 2>/dev/null || echo 0)
  if [ "$got" != "$2" ]; then echo "downloading $5 failed: $got bytes, the hub lists $2" >"$errors_of"; return 1; fi
  if [ "$3" = sha256 ]; then
    sum=$(sha256sum < "$4" | cut -d' ' -f1)
  else
    sum=$({ printf 'blob %s\0' "$2"; cat -- "$4"; } | sha1sum | cut -d' ' -f1)
  fi
  if [ "$sum" != "$1" ]; then echo "downloading $5 failed: its hash $sum is not the hub's $1" >"$errors_of"; return 1; fi
}

fetch() {  # etag size kind url path: one connection, curl -C - resumes the .part where it stopped
  local blob="$storage/blobs/$1" part="$storage/blobs/$1.part" size=$2 attempt=0 have rc status curl_pid=''
  local errors_of; errors_of=$(mktemp)
  trap 'if [ -n "$curl_pid" ]; then kill "$curl_pid" 2>/dev/null; fi; rm -f -- "$errors_of"; exit 143' TERM
  if [ -f "$blob" ] && [ "$(stat -c %s -- "$blob")" = "$size" ]; then rm -f -- "$errors_of"; return 0; fi
  while :; do
    attempt=$((attempt + 1))
    have=$(stat -c %s -- "$part" 2>/dev/null || echo 0)
    if [ "$have" -gt "$size" ]; then rm -f -- "$part"; have=0; fi
    if [ "$have" -lt "$size" ] && no_space "$storage/blobs" $((size - have)) "$5"; then rm -f -- "$errors_of"; return 1; fi
    if [ "$have" -lt "$size" ]; then
      auth | curl -sS -f -L -K - -C - --connect-timeout 20 --speed-limit 1024 --speed-time 60 \
        -w '%{stderr}status=%{http_code}\n' -o "$part" -- "$4" 2>"$errors_of" &
      curl_pid=$!
      rc=0; wait "$curl_pid" || rc=$?; curl_pid=''
      if [ "$rc" -eq 23 ]; then
        have=$(stat -c %s -- "$part" 2>/dev/null || echo 0)
        no_space "$storage/blobs" $((size - have)) "$5" && { rm -f -- "$errors_of"; return 1; }
      fi
      if [ "$rc" -ne 0 ]; then
        status=$(sed -n 's/^status=//p' "$errors_of" | tail -n 1)
        if refused "$rc" "$status"; then
          if [ "$status" = 000 ]; then status="no such file"; else status="HTTP $status"; fi
          echo "downloading $5 failed for good: $status from $4 (curl exit $rc): $(grep -v '^status=' "$errors_of" | head -c 500)" >&2
          rm -f -- "$errors_of"; return "$for_good"
        fi
        if [ "$attempt" -lt "$attempts" ]; then echo "retry=$5"; sleep 2; continue; fi
        echo "downloading $5 failed (curl exit $rc, HTTP $status from $4): $(grep -v '^status=' "$errors_of" | head -c 500)" >&2
        rm -f -- "$errors_of"; return 1
      fi
    fi
    if ! checked "$1" "$size" "$3" "$part" "$5"; then
      rm -f -- "$part"
      if [ "$attempt" -lt "$attempts" ]; then continue; fi
      echo "$(cat -- "$errors_of") (for good after $attempt attempts, from $4)" >&2; rm -f -- "$errors_of"
      return "$for_good"
    fi
    mv -f -- "$part" "$blob"
    rm -f -- "$errors_of"
    return 0
  done
}

range_worker() {  # part marks url errors ranges...: every range without its marker, at its offset;
  # returns 3 when the server ignores ranges, 4 when it refused the file for good
  local part=$1 marks=$2 url=$3 errors=$4 range start len fifo dd_pid='' curl_pid='' crc drc status got
  shift 4
  fifo=$(mktemp -u); mkfifo -m 600 -- "$fifo"
  trap 'kill $curl_pid $dd_pid 2>/dev/null; rm -f -- "$fifo"; exit 143' TERM
  for range in "$@"; do
    [ -e "$marks/$range" ] && continue
    start=${range%-*}; len=$((${range#*-} - start + 1))
    # dd writes at most the range's length at its offset (a server that ignores Range and sends the
    # whole file overwrites nothing beyond it, and curl's status says so below)
    dd if="$fifo" of="$part" bs=1M seek="$start" oflag=seek_bytes iflag=count_bytes,fullblock count="$len" \
      conv=notrunc status=none 2>>"$errors" &
    dd_pid=$!
    exec 7>"$fifo"
    auth | curl -sS -f -L -K - -r "$range" --connect-timeout 20 --speed-limit 1024 --speed-time 60 \
      -w '%{stderr}status=%{http_code} got=%{size_download}\n' -o - -- "$url" >&7 2>>"$errors" &
    curl_pid=$!
    exec 7>&-
    crc=0; wait "$curl_pid" || crc=$?; curl_pid=''
    drc=0; wait "$dd_pid" || drc=$?; dd_pid=''
    read -r status got < <(tail -n 1 -- "$errors")
    if [ "$status" = "status=200" ]; then rm -f -- "$fifo"; return 3; fi  # no ranges: one connection
    if [ "$crc" -ne 0 ] || [ "$drc" -ne 0 ] || [ "$status" != "status=206" ] || [ "$got" != "got=$len" ]; then
      echo "range $range: curl exit $crc, dd exit $drc, $status $got" >>"$errors"
      rm -f -- "$fifo"
      if refused "$crc" "${status#status=}"; then echo "refused=${status#status=}" >>"$errors"; return 4; fi
      return 1
    fi
    : >"$marks/$range"
  done
  rm -f -- "$fifo"
}

fetch_ranged() {  # etag size kind url path ranges...: `connections` ranged requests at once
  local blob="$storage/blobs/$1" part="$storage/blobs/$1.part" marks="$manifests/.chunks/$1" size=$2
  local etag=$1 kind=$3 url=$4 path=$5 attempt=0 w i rc pids=() mine errors_of
  shift 5
  if [ -f "$blob" ] && [ "$(stat -c %s -- "$blob")" = "$size" ]; then return 0; fi
  errors_of=$(mktemp)
  trap 'kill "${pids[@]}" 2>/dev/null; wait; rm -f -- "$errors_of" "$errors_of".*; exit 143' TERM
  while :; do
    attempt=$((attempt + 1))
    # a .part without markers is an older single-connection one (or stray): start it over
    [ -d "$marks" ] || rm -f -- "$part"
    mkdir -p -- "$marks"
    if no_space "$storage/blobs" $((size - $(held "$part" "$size"))) "$path"; then rm -f -- "$errors_of"; return 1; fi
    rm -f -- "$errors_of".*; pids=()
    for ((w = 0; w < connections; w++)); do
      mine=()
      for ((i = w; i < $#; i += connections)); do mine+=("${@:i+1:1}"); done
      [ "${#mine[@]}" -gt 0 ] || break
      range_worker "$part" "$marks" "$url" "$errors_of.$w" "${mine[@]}" &
      pids+=($!)
    done
    rc=0
    for w in "${pids[@]}"; do  # no ranges (3) over refused (4) over the first other failure
      wait "$w" && continue
      i=$?
      if [ "$rc" -eq 0 ] || [ "$i" -eq 3 ] || { [ "$i" -eq 4 ] && [ "$rc" -ne 3 ]; }; then rc=$i; fi
    done
    pids=()
    if [ "$rc" -eq 3 ]; then  # the server sends whole files only
      rm -rf -- "$part" "$marks"; rm -f -- "$errors_of"
      fetch "$etag" "$size" "$kind" "$url" "$path"; return
    fi
    if [ "$rc" -eq 4 ]; then
      echo "downloading $path failed for good: HTTP $(sed -n 's/^refused=//p' "$errors_of".* | head -n 1) from $url" >&2
      rm -f -- "$errors_of" "$errors_of".*; return "$for_good"
    fi
    if [ "$rc" -ne 0 ]; then
      if no_space "$storage/blobs" $((size - $(held "$part" "$size"))) "$path"; then rm -f -- "$errors_of"; return 1; fi
      if [ "$attempt" -lt "$attempts" ]; then echo "retry=$path"; sleep 2; continue; fi
      echo "downloading $path failed: $(cat -- "$errors_of".* | grep -v '^status=\|^refused=' | tail -n 3 | head -c 500)" >&2
      rm -f -- "$errors_of" "$errors_of".*; return 1
    fi
    if ! checked "$etag" "$size" "$kind" "$part" "$path"; then
      rm -rf -- "$part" "$marks"
      if [ "$attempt" -lt "$attempts" ]; then continue; fi
      echo "$(cat -- "$errors_of") (for good after $attempt attempts, from $url)" >&2; rm -f -- "$errors_of"
      return "$for_good"
    fi
    mv -f -- "$part" "$blob"
    rm -rf -- "$marks" "$errors_of" "$errors_of".*
    return 0
  done
}

report() {  # progress=BYTES from the disk: a blob in place counts whole, a .part what it holds
  local total=$done_bytes entry etag size
  for entry in "${wanted[@]}"; do
    etag=${entry%:*}; size=${entry#*:}
    if [ -f "$storage/blobs/$etag" ]; then total=$((total + size))
    else total=$((total + $(held "$storage/blobs/$etag.part" "$size"))); fi
  done
  echo "progress=$total"
}

declare -A running=()
stop_all() {
  local pid
  for pid in "${!running[@]}"; do kill "$pid" 2>/dev/null; done
  wait
}

wait_slots() {  # until fewer than $1 downloads run; a failed one stops the others and the run, which
  # exits $for_good when a file failed for good, else 1
  local pid failed='' rc
  while :; do
    for pid in "${!running[@]}"; do
      kill -0 "$pid" 2>/dev/null && continue
      rc=0; wait "$pid" || rc=$?
      if [ "$rc" -eq "$for_good" ]; then failed=$for_good; elif [ "$rc" -ne 0 ] && [ -z "$failed" ]; then failed=1; fi
      unset "running[$pid]"
    done
    if [ -n "$failed" ]; then stop_all; running=(); exit "$failed"; fi
    [ "${#running[@]}" -lt "$1" ] && return 0
    report
    sleep 0.5
  done
}

start() {  # fetch|fetch_ranged etag size kind url path [ranges...]: in the background, in a free slot
  wait_slots "$parallel_files"
  echo "file=$6"
  "$@" &
  running[$!]=$6
}

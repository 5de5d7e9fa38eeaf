# shellcheck shell=bash
# provision facts probe: what the machine is, in one round trip. This file is the start of the probe
# (its options and helpers) and the generic sections' functions; provision/facts/probe.py assembles
# the script: a subshell holding this, every registered owner's probe shell (provision/gpu/probe.sh),
# then one `if want NAME; then section NAME; FUNCTION; fi` block a registered section.
#
# Output: sections, each a line `@@section NAME` followed by that section's raw output (always
# ending in a newline, so the next header starts a line). The owners' parsers read them.
# Runs as root through `bash -s` after `set -euo pipefail`, inside a subshell with its own options
# and stdin from /dev/null, so it never fails.
# Fast on purpose: no apt, no package queries; only commands that answer in milliseconds
# (docker and nvidia-smi are bounded by timeouts in case a daemon or driver hangs).
# PROBE_SECTIONS (set by the caller before the script; unset: all) names the sections to print, so a
# run gathers only the facts its tasks read (provision/facts/sections.py says which fields need which).
set +e +u
set +o pipefail 2>/dev/null
export LC_ALL=C
PATH=${PATH:-/usr/bin:/bin}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

have() { command -v "$1" >/dev/null 2>&1; }
bounded() { _secs=$1; shift; if have timeout; then timeout "$_secs" "$@"; else "$@"; fi; }
# whether section NAME was asked for
want() { case " ${PROBE_SECTIONS:-all} " in *" all "* | *" $1 "*) return 0 ;; esac; return 1; }
section() { printf '@@section %s\n' "$1"; }
# print a command's stdout, ending in exactly one newline (nothing when it printed nothing)
emit() { _out=$("$@" 2>/dev/null); [ -n "$_out" ] && printf '%s\n' "$_out"; return 0; }
yes_no() { if "$@"; then echo yes; else echo no; fi; }

# read by bash itself: `emit cat` cost a fork and an exec in every run that reads the OS
probe_os_release() {
  local _file=/etc/os-release _line
  [ -r "$_file" ] || _file=/usr/lib/os-release
  while IFS= read -r _line || [ -n "$_line" ]; do printf '%s\n' "$_line"; done 2>/dev/null < "$_file"
}

probe_kernel() {
  emit uname -r
  emit uname -m
}

probe_boot_id() { emit cat /proc/sys/kernel/random/boot_id; }

probe_reboot_marker() { yes_no test -e /run/provision/boot-marker; }

probe_cpus() { if have nproc; then emit nproc; else emit getconf _NPROCESSORS_ONLN; fi; }

probe_meminfo() { emit grep -E '^(MemTotal|MemAvailable):' /proc/meminfo; }

probe_disk_free() {
  set --
  for _path in / /var/lib/docker /var/cache; do [ -e "$_path" ] && set -- "$@" "$_path"; done
  emit bounded 10 df -Pk "$@"
}

probe_systemd() {
  echo "booted=$(yes_no test -d /run/systemd/system)"
  if have systemctl; then echo "state=$(bounded 5 systemctl is-system-running 2>/dev/null)"; fi
}

probe_docker() {
  if have docker; then
    echo "client=yes"
    _server=$(bounded 10 docker version --format '{{.Server.Version}}' 2>/dev/null)
    echo "server_rc=$?"
    echo "server=$_server"
  else
    echo "client=no"
  fi
}

# mokutil's words when it exists; the EFI variable's bytes as well (its last byte 1 = enabled)
probe_secure_boot() {
  if have mokutil; then
    bounded 5 mokutil --sb-state 2>&1 | sed 's/^/mokutil=/'
    # whether DKMS's signing key is an enrolled Machine Owner Key (DKMS signs what it builds with it)
    [ -r /var/lib/dkms/mok.pub ] && bounded 5 mokutil --test-key /var/lib/dkms/mok.pub 2>&1 | sed 's/^/mok-test-key=/'
  fi
  if [ -d /sys/firmware/efi ]; then
    echo "efi=yes"
    echo "efivars=$(yes_no test -n "$(ls -A /sys/firmware/efi/efivars 2>/dev/null)")"
    _var=/sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c
    [ -r "$_var" ] && echo "efivar=$(od -An -tu1 "$_var" 2>/dev/null | tr -s ' \n' '  ')"
  else
    echo "efi=no"
  fi
}

# an encrypted root waits at a passphrase prompt after a reboot: the block devices under /
probe_root_encryption() {
  _root=$(findmnt -n -o SOURCE / 2>/dev/null)
  [ -n "$_root" ] && have lsblk && emit lsblk -n -s -r -o TYPE,FSTYPE "$_root"
}

# logind sessions: restarting systemd-logind would end the local ones. "ID Remote=no Class=user ..."
probe_sessions() {
  if have loginctl; then
    for _s in $(bounded 5 loginctl list-sessions --no-legend 2>/dev/null | awk '{ print $1 }'); do
      echo "$_s $(bounded 5 loginctl show-session "$_s" -p Remote -p Class -p Type -p State 2>/dev/null | tr '\n' ' ')"
    done
  fi
}

probe_cloud_init() { echo "present=$(yes_no have cloud-init)"; }

# One line per dpkg lock file: "PATH held PID" / free / absent / unknown (fcntl_lock.sh: who holds it).
probe_dpkg_lock() {
  for _lock in /var/lib/dpkg/lock-frontend /var/lib/dpkg/lock; do
    if [ ! -e "$_lock" ]; then echo "$_lock absent"; continue; fi
    _pid=$(fcntl_lock_pid "$_lock") || { echo "$_lock unknown"; continue; }
    if [ -n "$_pid" ]; then echo "$_lock held $_pid"; else echo "$_lock free"; fi
  done
}

# shellcheck shell=bash
# provision facts probe: what the machine is, in one round trip.
#
# Output: sections, each a line `@@section NAME` followed by that section's raw output (always
# ending in a newline, so the next header starts a line). provision/facts/parse.py reads them.
# Runs as root through `bash -s` after `set -euo pipefail`; the body is a subshell with its own
# options and stdin from /dev/null, so it never fails, never eats the rest of a script that the
# runner appends (its `@@task N` sections), and leaves the caller's shell options alone.
# Fast on purpose: no apt, no package queries; only commands that answer in milliseconds
# (docker and nvidia-smi are bounded by timeouts in case a daemon or driver hangs).
# PROBE_SECTIONS (set by the caller before this text; unset: all) names the sections to print, so a
# run gathers only the facts its tasks read (provision/facts/sections.py says which fields need which).
(
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

# always: which sections this run asked for (the parser knows from it which facts were gathered)
section probe
echo "${PROBE_SECTIONS:-all}"

if want os-release; then
  section os-release
  if [ -r /etc/os-release ]; then emit cat /etc/os-release; else emit cat /usr/lib/os-release; fi
fi

if want kernel; then
  section kernel
  emit uname -r
  emit uname -m
fi

if want boot-id; then
  section boot-id
  emit cat /proc/sys/kernel/random/boot_id
fi

if want reboot-marker; then
  section reboot-marker
  yes_no test -e /run/provision/boot-marker
fi

if want cpus; then
  section cpus
  if have nproc; then emit nproc; else emit getconf _NPROCESSORS_ONLN; fi
fi

if want meminfo; then
  section meminfo
  emit grep -E '^(MemTotal|MemAvailable):' /proc/meminfo
fi

if want disk-free; then
  section disk-free
  set --
  for _path in / /var/lib/docker /var/cache; do [ -e "$_path" ] && set -- "$@" "$_path"; done
  emit bounded 10 df -Pk "$@"
fi

if want systemd; then
  section systemd
  echo "booted=$(yes_no test -d /run/systemd/system)"
  if have systemctl; then echo "state=$(bounded 5 systemctl is-system-running 2>/dev/null)"; fi
fi

if want docker; then
  section docker
  if have docker; then
    echo "client=yes"
    _server=$(bounded 10 docker version --format '{{.Server.Version}}' 2>/dev/null)
    echo "server_rc=$?"
    echo "server=$_server"
  else
    echo "client=no"
  fi
fi

# NVIDIA (vendor 0x10de) display controllers (class 0x03xxxx): "address vendor device class"
if want pci-nvidia; then
  section pci-nvidia
  for _dev in /sys/bus/pci/devices/*; do
    [ -r "$_dev/vendor" ] || continue
    { read -r _vendor < "$_dev/vendor"; } 2>/dev/null || continue
    [ "$_vendor" = 0x10de ] || continue
    { read -r _class < "$_dev/class"; read -r _device < "$_dev/device"; } 2>/dev/null
    case $_class in 0x03*) echo "${_dev##*/} $_vendor $_device $_class" ;; esac
  done
fi

if want nvidia-smi; then
  section nvidia-smi
  if have nvidia-smi; then
    _smi=$(bounded 30 nvidia-smi \
      --query-gpu=index,name,pci.device_id,driver_version,compute_cap,memory.total \
      --format=csv,noheader,nounits 2>&1)
    _smi_rc=$?
    [ -n "$_smi" ] && printf '%s\n' "$_smi"
  else
    _smi_rc=absent
  fi
  section nvidia-smi-rc
  echo "$_smi_rc"
fi

# memory in use and by whom (a desktop session on the dGPU, another process): "PID, NAME, MIB" lines
# (nvidia-smi -q -d PIDS lists graphics processes too, which --query-compute-apps leaves out)
if want nvidia-smi-pids; then
  section nvidia-smi-pids
  [ "$_smi_rc" = 0 ] && emit bounded 30 nvidia-smi -q -d PIDS,MEMORY
fi

# the driver's, the kernel metas' and the docker engine's packages as dpkg knows them: "STATUS PACKAGE
# VERSION" (no driver package: installed outside apt)
if want nvidia-packages; then
  section nvidia-packages
  # shellcheck disable=SC2016 # dpkg-query's own ${field} format, not a shell expansion
  have dpkg-query && emit dpkg-query -W -f='${db:Status-Abbrev} ${Package} ${Version}\n' -- \
    'nvidia-*' 'libnvidia-*' 'linux-modules-nvidia-*' 'linux-objects-nvidia-*' 'linux-signatures-nvidia-*' \
    'xserver-xorg-video-nvidia*' 'linux-image-generic*' 'linux-image-oem*' 'linux-generic*' 'linux-oem-*' \
    'docker-ce' 'docker-ce-cli' 'containerd.io' 'docker-compose-plugin' 'docker-buildx-plugin' 'docker.io'
  [ -x /usr/bin/nvidia-installer ] && echo "runfile-installer yes"
fi

# the apt source lines of NVIDIA's repositories (deb lines, deb822 URIs/Signed-By naming nvidia or cuda:
# NVIDIA's hosts, and a mirror's cuda/repos and libnvidia-container paths): "FILE<TAB>LINE", so that
# entries of an earlier attempt, with another Signed-By, are found; the distribution's own are not listed
if want apt-sources; then
  section apt-sources
  for _file in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
    [ -r "$_file" ] || continue
    grep -iE '^[[:space:]]*(deb(-src)?[[:space:]]|URIs:|Signed-By:)' "$_file" 2>/dev/null | grep -iE 'nvidia|cuda' |
      sed "s|^|$_file\t|"
  done
fi

# every installed kernel and whether it has an NVIDIA module (DKMS build or a signed package)
if want kernel-modules; then
  section kernel-modules
  for _dir in /lib/modules/*/; do
    [ -d "$_dir" ] || continue
    _k=${_dir%/}; _k=${_k##*/}
    if [ -n "$(find "$_dir" -name 'nvidia.ko*' -print -quit 2>/dev/null)" ]; then echo "$_k yes"; else echo "$_k no"; fi
  done
fi

if want nvidia-proc-version; then
  section nvidia-proc-version
  emit cat /proc/driver/nvidia/version
fi

if want nvidia-module-version; then
  section nvidia-module-version
  emit cat /sys/module/nvidia/version
fi

if want nouveau; then
  section nouveau
  if [ -d /sys/module/nouveau ] || grep -q '^nouveau ' /proc/modules 2>/dev/null; then
    echo "loaded=yes"
  else
    echo "loaded=no"
  fi
fi

# mokutil's words when it exists; the EFI variable's bytes as well (its last byte 1 = enabled)
if want secure-boot; then
  section secure-boot
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
fi

# an encrypted root waits at a passphrase prompt after a reboot: the block devices under /
if want root-encryption; then
  section root-encryption
  _root=$(findmnt -n -o SOURCE / 2>/dev/null)
  [ -n "$_root" ] && have lsblk && emit lsblk -n -s -r -o TYPE,FSTYPE "$_root"
fi

# logind sessions: restarting systemd-logind would end the local ones. "ID Remote=no Class=user ..."
if want sessions; then
  section sessions
  if have loginctl; then
    for _s in $(bounded 5 loginctl list-sessions --no-legend 2>/dev/null | awk '{ print $1 }'); do
      echo "$_s $(bounded 5 loginctl show-session "$_s" -p Remote -p Class -p Type -p State 2>/dev/null | tr '\n' ' ')"
    done
  fi
fi

if want prime-select; then
  section prime-select
  have prime-select && emit bounded 5 prime-select query
fi

if want cloud-init; then
  section cloud-init
  echo "present=$(yes_no have cloud-init)"
fi

# apt and dpkg lock with fcntl (POSIX) locks, which `flock -n` cannot see; /proc/locks lists
# them as MAJOR:MINOR:INODE (hex, hex, decimal). One line per lock file: "PATH held PID" / free / absent.
if want dpkg-lock; then
  section dpkg-lock
  for _lock in /var/lib/dpkg/lock-frontend /var/lib/dpkg/lock; do
    if [ ! -e "$_lock" ]; then echo "$_lock absent"; continue; fi
    _st=$(stat -c '%d %i' "$_lock" 2>/dev/null)
    [ -n "$_st" ] || { echo "$_lock unknown"; continue; }
    _devno=${_st% *}
    _key=$(printf '%02x:%02x:%s' $(( ((_devno >> 8) & 0xfff) | ((_devno >> 32) & 0xfffff000) )) \
      $(( (_devno & 0xff) | ((_devno >> 12) & 0xffffff00) )) "${_st#* }")
    _pid=$(awk -v key="$_key" '{ for (i = 2; i <= NF; i++) if ($i == key) { print $(i - 1); exit } }' \
      /proc/locks 2>/dev/null)
    if [ -n "$_pid" ]; then echo "$_lock held $_pid"; else echo "$_lock free"; fi
  done
fi
true
) </dev/null

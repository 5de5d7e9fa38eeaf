# shellcheck shell=bash
# The NVIDIA sections of the facts probe: one function a section (provision/gpu/facts.py registers
# them), run after provision/facts/probe.sh's helpers (have, bounded, emit, yes_no) inside the probe.

# NVIDIA (vendor $1, 0xVENDOR as sysfs writes it) display controllers (class 0x03xxxx):
# "address vendor device class"
probe_pci_nvidia() {
  for _dev in /sys/bus/pci/devices/*; do
    [ -r "$_dev/vendor" ] || continue
    { read -r _vendor < "$_dev/vendor"; } 2>/dev/null || continue
    [ "$_vendor" = "$1" ] || continue
    { read -r _class < "$_dev/class"; read -r _device < "$_dev/device"; } 2>/dev/null
    case $_class in 0x03*) echo "${_dev##*/} $_vendor $_device $_class" ;; esac
  done
}

# the GPUs as nvidia-smi sees them, then its exit code in its own section (nvidia-smi-pids reads it)
probe_nvidia_smi() {
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
}

# memory in use and by whom (a desktop session on the dGPU, another process): "PID, NAME, MIB" lines
# (nvidia-smi -q -d PIDS lists graphics processes too, which --query-compute-apps leaves out)
probe_nvidia_smi_pids() { [ "$_smi_rc" = 0 ] && emit bounded 30 nvidia-smi -q -d PIDS,MEMORY; }

# the driver's, the kernel metas' and the docker engine's packages as dpkg knows them: "STATUS PACKAGE
# VERSION" (no driver package: installed outside apt); one dpkg-query for the three (provision/facts/dpkg_rows.sh)
probe_nvidia_packages() {
  dpkg_rows facts \
    'nvidia-*' 'libnvidia-*' 'linux-modules-nvidia-*' 'linux-objects-nvidia-*' 'linux-signatures-nvidia-*' \
    'xserver-xorg-video-nvidia*' 'linux-image-generic*' 'linux-image-oem*' 'linux-generic*' 'linux-oem-*' \
    'docker-ce' 'docker-ce-cli' 'containerd.io' 'docker-compose-plugin' 'docker-buildx-plugin' 'docker.io'
  [ -x /usr/bin/nvidia-installer ] && echo "runfile-installer yes"
}

# the apt source lines of NVIDIA's repositories (deb lines, deb822 URIs/Signed-By naming nvidia or cuda:
# NVIDIA's hosts, and a mirror's cuda/repos and libnvidia-container paths): "FILE<TAB>LINE", so that
# entries of an earlier attempt, with another Signed-By, are found; the distribution's own are not listed
probe_apt_sources() {
  for _file in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
    [ -r "$_file" ] || continue
    grep -iE '^[[:space:]]*(deb(-src)?[[:space:]]|URIs:|Signed-By:)' "$_file" 2>/dev/null | grep -iE 'nvidia|cuda' |
      sed "s|^|$_file\t|"
  done
}

# every installed kernel and whether it has an NVIDIA module (DKMS build or a signed package)
probe_kernel_modules() {
  for _dir in /lib/modules/*/; do
    [ -d "$_dir" ] || continue
    _k=${_dir%/}; _k=${_k##*/}
    if [ -n "$(find "$_dir" -name 'nvidia.ko*' -print -quit 2>/dev/null)" ]; then echo "$_k yes"; else echo "$_k no"; fi
  done
}

probe_nvidia_proc_version() { emit cat /proc/driver/nvidia/version; }

probe_nvidia_module_version() { emit cat /sys/module/nvidia/version; }

probe_nouveau() {
  if [ -d /sys/module/nouveau ] || grep -q '^nouveau ' /proc/modules 2>/dev/null; then
    echo "loaded=yes"
  else
    echo "loaded=no"
  fi
}

probe_prime_select() { have prime-select && emit bounded 5 prime-select query; }

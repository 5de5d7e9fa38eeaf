# shellcheck shell=sh
# kernelfs.sh: shell functions included (at build time) by the stand-ins that simulate kernel state.
# A lab host shares this machine's kernel, so a stand-in "module" can only become visible in sysfs or
# procfs by mounting a tmpfs over the directory (/sys/module, /proc/driver) that carries the real
# entries as bind mounts plus the simulated ones. Every boot of a lab host drops these mounts, as a
# reboot unloads real modules. With $NVIDIA_STANDIN_ROOT set (unit tests) plain directories are used.

# standin_writable_dir DIR: make DIR writable as above; non-zero when it cannot be (no CAP_SYS_ADMIN).
standin_writable_dir() {
    _dir=${NVIDIA_STANDIN_ROOT:-}$1
    if [ -n "${NVIDIA_STANDIN_ROOT:-}" ]; then
        mkdir -p "$_dir"
        return
    fi
    [ "$(findmnt -n -o FSTYPE --mountpoint "$_dir" 2>/dev/null)" = tmpfs ] && return 0
    _orig=$(mktemp -d /run/standin-kernelfs.XXXXXX) || return 1
    if ! mount --bind "$_dir" "$_orig" 2>/dev/null; then
        rmdir "$_orig"
        return 1
    fi
    if ! mount -t tmpfs -o mode=0755 standin-kernelfs "$_dir" 2>/dev/null; then
        umount "$_orig"; rmdir "$_orig"
        return 1
    fi
    for _entry in "$_orig"/*; do
        [ -e "$_entry" ] || continue
        _name=${_entry##*/}
        if [ -d "$_entry" ]; then mkdir "$_dir/$_name"; else : > "$_dir/$_name"; fi
        mount --bind "$_entry" "$_dir/$_name"
    done
    umount "$_orig"
    rmdir "$_orig"
}

# standin_module_add NAME [VERSION]: /sys/module/NAME as a loaded module shows it.
standin_module_add() {
    standin_writable_dir /sys/module || return 1
    _mod=${NVIDIA_STANDIN_ROOT:-}/sys/module/$1
    mkdir -p "$_mod/parameters" "$_mod/holders"
    echo live > "$_mod/initstate"
    echo 0 > "$_mod/refcnt"
    [ -n "${2:-}" ] && echo "$2" > "$_mod/version"
    return 0
}

# standin_module_remove NAME
standin_module_remove() {
    rm -rf "${NVIDIA_STANDIN_ROOT:-}/sys/module/$1" 2>/dev/null
    return 0
}

# standin_module_loaded NAME
standin_module_loaded() {
    [ -d "${NVIDIA_STANDIN_ROOT:-}/sys/module/$1" ]
}

# standin_blacklisted NAME: modprobe.d blacklists it (autoloading at boot would skip it)
standin_blacklisted() {
    _root=${NVIDIA_STANDIN_ROOT:-}
    grep -Eqs "^[[:space:]]*blacklist[[:space:]]+$1[[:space:]]*\$" \
        "$_root"/etc/modprobe.d/*.conf "$_root"/run/modprobe.d/*.conf \
        "$_root"/lib/modprobe.d/*.conf "$_root"/usr/lib/modprobe.d/*.conf && return 0
    grep -Eqs "(^|[[:space:]])modprobe\\.blacklist=([^[:space:]]*,)?$1(,|[[:space:]]|\$)" "$_root/proc/cmdline"
}

#!/bin/bash
# The office cache host's state, as key=value lines (read by provision/office_cache/status.py):
# each service's systemd state, bytes through apt-cacher-ng and the hub mirror, free disk.
for unit in apt-cacher-ng docker-registry provision-seed-registry nginx; do
  echo "unit.$unit=$(systemctl is-active "$unit" 2>/dev/null || true)"
done
# apt-cacher-ng's transfer log: `time|I|bytes|client|path` fetched upstream, `|O|` served to clients.
awk -F'|' '$2 == "I" { i += $3 } $2 == "O" { o += $3 } END { printf "apt.upstream_bytes=%d\napt.served_bytes=%d\n", i, o }' \
  /var/log/apt-cacher-ng/apt-cacher.log 2>/dev/null
# The hub mirror's log (roles/office_cache): the last two fields are nginx's cache status and bytes sent;
# a file at a commit answered with no cache status ("-", status 200) came from a bundle's seed: a hit.
awk '$(NF-1) == "HIT" || ($(NF-1) == "-" && $(NF-2) == 200 && $0 ~ /\/resolve\//) { h += $NF }
     $(NF-1) == "MISS" || $(NF-1) == "EXPIRED" { m += $NF }
     END { printf "hub.hit_bytes=%d\nhub.miss_bytes=%d\n", h, m }' /var/log/nginx/provision-hf-mirror.log 2>/dev/null
# The hub cache's bound: nginx's max_size, as the config on the host says (roles/office_cache).
sed -n 's/.*max_size=\([0-9]*[kKmMgG]\?\).*/hub.max_size=\1/p' /etc/nginx/conf.d/provision-hf-mirror.conf 2>/dev/null
df -Pk /var/cache 2>/dev/null | awk 'NR == 2 { printf "disk.free_kib=%s\ndisk.used_kib=%s\n", $4, $3 }'

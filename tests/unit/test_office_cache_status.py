"""The office cache's status: the host script's output parsed into services, hit rates and disk.

The apt-cacher-ng lines are its transfer log format (`time|I|bytes|client|path`, `O` for served),
as written by apt-cacher-ng 3.7 (Debian bookworm); the script is run here on recorded logs."""

from __future__ import annotations

import subprocess
from pathlib import Path

from provision.office_cache.status import parse_cache_status, status_script

RECORDED = """unit.apt-cacher-ng=active
unit.docker-registry=active
unit.nginx=failed
apt.upstream_bytes=1000
apt.served_bytes=5000
hub.hit_bytes=300
hub.miss_bytes=100
disk.free_kib=62914560
disk.used_kib=1
"""


def test_hit_rates_are_by_bytes_and_a_failed_service_is_unhealthy() -> None:
    status = parse_cache_status(RECORDED)
    assert status.apt_hit_rate == 0.8 and status.hub_hit_rate == 0.75
    assert status.units["nginx"] == "failed" and not status.healthy
    assert status.disk_free_kib == 62914560


def test_nothing_served_yet_has_no_hit_rate() -> None:
    status = parse_cache_status("unit.nginx=active\n")
    assert status.apt_hit_rate is None and status.hub_hit_rate is None
    assert status.units["docker-registry"] == "unknown"


def test_the_script_reads_the_logs(tmp_path: Path) -> None:
    apt_log = tmp_path / "apt-cacher.log"
    apt_log.write_text("1764580000|I|4000|10.0.2.2|debrep/pool/main/d/docker.io/docker.io_20.10.24.deb\n"
                       "1764580000|O|4000|10.0.2.2|debrep/pool/main/d/docker.io/docker.io_20.10.24.deb\n"
                       "1764580009|O|4000|10.0.2.2|debrep/pool/main/d/docker.io/docker.io_20.10.24.deb\n")
    hub_log = tmp_path / "hub.log"
    hub_log.write_text('10.0.2.2 [01/Dec/2026:09:40:00 +0000] "GET /o/m/resolve/abc/x HTTP/1.1" 200 MISS 8388608\n'
                       '10.0.2.2 [01/Dec/2026:09:40:09 +0000] "GET /o/m/resolve/abc/x HTTP/1.1" 200 HIT 8388608\n'
                       '10.0.2.2 [01/Dec/2026:09:40:09 +0000] "GET /api/models/o/m HTTP/1.1" 200 - 900\n')
    script = (status_script().replace("/var/log/apt-cacher-ng/apt-cacher.log", str(apt_log))
              .replace("/var/log/nginx/provision-hf-mirror.log", str(hub_log)))
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True)
    status = parse_cache_status(done.stdout)
    assert (status.apt_upstream_bytes, status.apt_served_bytes) == (4000, 8000)
    assert status.hub_hit_rate == 0.5


def test_the_script_reads_the_hub_cache_bound_from_the_roles_nginx_config(tmp_path: Path) -> None:
    template = Path(__file__).parents[2] / "roles/office_cache/templates/hf-mirror.nginx.conf.j2"
    config = tmp_path / "provision-hf-mirror.conf"  # the role's proxy_cache_path lines, its default bound
    config.write_text(template.read_text().replace("{{ office_cache_hf_max_size }}", "200g"))
    script = status_script().replace("/etc/nginx/conf.d/provision-hf-mirror.conf", str(config))
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True)
    status = parse_cache_status(done.stdout)
    assert status.hub_max_size == "200g" and status.disk_used_kib is not None

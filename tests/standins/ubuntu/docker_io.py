"""The month's docker.io update: Ubuntu publishes docker.io SRUs in noble-updates and noble-security
(packages.ubuntu.com/noble-updates/docker.io; Launchpad's source package docker.io-app, e.g.
29.1.3-0ubuntu3~24.04.2), and unattended-upgrades takes the -security one like any other package.
The lab laptop's docker.io is the lab's real Debian one (its Ubuntu archive is a stand-in); the update
stands in by repackaging that real deb unchanged but for its version (+SUFFIX, higher than the installed
one) and its section (universe, where Ubuntu's docker.io is). Its maintainer scripts, and so what they
do to a running dockerd during the upgrade, are the real package's.
"""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

from tests.lab import LabHost
from tests.standins.nvidia.debs import DebSpec

# on the host: fetch the installed version's deb from the archive it came from, bump its version, rebuild
# (gzip -1: the payload is ~100 MB unpacked, xz would cost the walk most of a minute)
REPACK = """set -e
rm -rf /root/docker-io-update && mkdir /root/docker-io-update && cd /root/docker-io-update
installed=$(dpkg-query -W -f='${{Version}}' docker.io)
apt-get download -qq "docker.io=$installed" 2>/dev/null
dpkg-deb -R docker.io_*.deb root
sed -i -e "s/^Version: .*/Version: $installed{suffix}/" -e 's|^Section: .*|Section: universe/admin|' root/DEBIAN/control
dpkg-deb --root-owner-group -Zgzip -z1 -b root update.deb >/dev/null
echo "$installed{suffix}"
"""


def repackaged_docker_io(host: LabHost, pool: Path, suffix: str = "+month2") -> DebSpec:
    """docker.io as installed on HOST, version + SUFFIX, built into POOL (a MonthlyArchive month folder);
    returns its DebSpec for the archive to list (its files are the real package's, not the spec's)."""
    rc, output = host.exec(REPACK.format(suffix=suffix))
    if rc != 0:
        raise RuntimeError(f"repackaging docker.io on {host.name}: {output[-2000:]}")
    spec = DebSpec("docker.io", output.strip().splitlines()[-1], "Linux container runtime",
                   section="universe/admin")
    stream, _ = host.container.get_archive("/root/docker-io-update/update.deb")
    with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
        member = tar.extractfile("update.deb")
        assert member is not None
        pool.mkdir(parents=True, exist_ok=True)
        (pool / spec.filename).write_bytes(member.read())
    host.exec("rm -rf /root/docker-io-update")
    return spec

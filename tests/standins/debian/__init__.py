"""A stand-in of Debian 12's and 13's security archives for the lab (see README.md): the amd64 kernels a
Debian laptop upgrades to, with Debian's names, dependency relations and maintainer scripts, published
month by month so that a test can travel in time through kernel updates and DKMS rebuilds.

- catalogue.py  what each month carries (kernel ABIs; whether the NVIDIA DKMS build works on each)
- packages.py   the packages of one kernel ABI and the amd64 metas (DebSpec, tiny payloads)
- archive.py    DebianSecurityArchive(out_dir, codename).publish(month): a signed apt archive
"""

from .archive import ARCHIVE_HOST, DebianSecurityArchive
from .catalogue import MONTHS, RELEASES, Month, Release

__all__ = ["ARCHIVE_HOST", "MONTHS", "RELEASES", "DebianSecurityArchive", "Month", "Release"]

"""A stand-in of Ubuntu's noble archive for the lab (see README.md): the kernel and NVIDIA packages
of a generic-hwe-24.04 laptop, with Ubuntu's names, versions and dependency relations (SOURCES.md),
published month by month so that a test can travel in time.

- catalogue.py  what each month of the archive carries (kernel ABIs, 580 releases)
- packages.py   the packages of one kernel ABI and of one driver release (DebSpec, tiny payloads)
- archive.py    UbuntuArchive(out_dir).publish(month): a signed apt archive (dists/, pool/)
- docker_io.py  the month's docker.io update: the host's real docker.io repackaged with a higher version
"""

from .archive import ARCHIVE_HOST, UbuntuArchive
from .catalogue import MONTHS, Month

__all__ = ["ARCHIVE_HOST", "MONTHS", "Month", "UbuntuArchive"]

#!/usr/bin/env python3
"""docker.io with its Recommends (apt's default) against the docker role's set on Debian 12 without them.

Each round starts two fresh lab hosts (Debian 12, the lab's archive) and installs on each, with
`policy-rc.d` keeping services stopped as the role installs them: on one `apt-get install docker.io`
(Recommends on, apt's default), on the other the role's set for Debian 12
(`docker_distro_runtime_packages` in roles/docker/defaults.yaml, which says why each is named),
`--no-install-recommends`. Each host first downloads (`-d`, timed apart), so the figure that matters,
dpkg's work (unpack, configure, triggers), is timed alone; the two installs run one after the other, in
an order that alternates between rounds. Prints per round and as medians: packages newly installed,
MB fetched, the download's and the install's seconds, and the ratio of the install times.

Usage: benchmarks/docker_install.py [--rounds 3]   (runs its own lab; root; ~1 min a round)
"""

from __future__ import annotations

import argparse
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.lab.lab import Lab  # noqa: E402

NO_SERVICES = "printf '#!/bin/sh\\nexit 101\\n' > /usr/sbin/policy-rc.d && chmod 755 /usr/sbin/policy-rc.d"
APT = "DEBIAN_FRONTEND=noninteractive apt-get -q -y -o Dpkg::Options::=--force-confdef"


def role_packages() -> list[str]:
    """The docker role's packages on the lab's Debian 12 hosts."""
    defaults = yaml.safe_load((REPO / "roles/docker/defaults.yaml").read_text())
    return list(defaults["docker_distro_runtime_packages"]["debian"]["12"])


def timed(container: str, script: str) -> tuple[float, str]:
    started = time.monotonic()
    done = subprocess.run(["docker", "exec", container, "bash", "-c", script], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{container}: {script!r} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return time.monotonic() - started, done.stdout


def install(container: str, flags: str, packages: list[str]) -> dict[str, float]:
    """Download, then install, on one host: seconds of each, packages newly installed, MB fetched."""
    timed(container, f"{NO_SERVICES} && apt-get -q update")
    names = " ".join(packages)
    download_s, output = timed(container, f"{APT} install -d {flags} {names}")
    fetched = re.search(r"Fetched ([\d.]+) ([kMG])B", output)
    scale = {"k": 1e-3, "M": 1.0, "G": 1e3}
    megabytes = float(fetched.group(1)) * scale[fetched.group(2)] if fetched else 0.0
    install_s, output = timed(container, f"{APT} install {flags} {names}")
    newly = re.search(r"(\d+) newly installed", output)
    return {"download_s": download_s, "install_s": install_s, "mb": megabytes,
            "packages": float(newly.group(1)) if newly else 0.0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    peers = {"with Recommends (docker.io)": ("", ["docker.io"]),
             "the role's set, no Recommends": ("--no-install-recommends", role_packages())}
    work = Path(tempfile.mkdtemp(prefix="plab-docker-install-", dir="/var/tmp"))
    lab = Lab(work / "lab", log=lambda _: None)
    figures: dict[str, list[dict[str, float]]] = {name: [] for name in peers}
    try:
        lab.start()
        for round_ in range(args.rounds):
            order = list(peers) if round_ % 2 == 0 else list(reversed(peers))
            hosts = lab.new_hosts(2, prefix=f"inst{round_}")
            for name, host in zip(order, hosts, strict=True):
                flags, packages = peers[name]
                figures[name].append(install(host.container_name, flags, packages))
                print(f"round {round_ + 1} {name}: {figures[name][-1]}", flush=True)
            for host in hosts:
                host.remove()
    finally:
        lab.down()
        shutil.rmtree(work, ignore_errors=True)
    medians = {name: {key: statistics.median(run[key] for run in runs) for key in runs[0]}
               for name, runs in figures.items()}
    for name, median in medians.items():
        print(f"{name} ({' '.join(peers[name][1])}): {median['packages']:.0f} packages, {median['mb']:.1f} MB, "
              f"download {median['download_s']:.1f} s, install {median['install_s']:.1f} s (medians)")
    ratios = [a["install_s"] / b["install_s"] for a, b in zip(*figures.values(), strict=True)]
    print(f"install time with Recommends / without: {statistics.median(ratios):.2f}x (median of "
          f"{len(ratios)} rounds: {', '.join(f'{r:.2f}' for r in ratios)})")


if __name__ == "__main__":
    main()

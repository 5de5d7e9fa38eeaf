#!/usr/bin/env python3
"""The whole site on one lab laptop: the first apply, then converged reruns of `provision up`.

Starts `python -m tests.lab up --laptop` (a simulated RTX 5090 laptop: the stand-in NVIDIA
repositories, hub and vLLM image), runs `provision up` on it once (timed, it must change things),
once more (the first rerun: the probe memory is written by it), then `--repeat` timed reruns that
must change nothing. Prints wall times (the whole process), the round trips per run from the
results document and the host's own `elapsed`. No peer tool runs the same site; the docker role's
comparison with pyinfra and ansible-core is benchmarks/noop_rerun.py's.
Usage: benchmarks/site_rerun.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from noop_rerun import BIN, REPO, compile_like_an_install, run

LAPTOP_READY_S = 600


def start_laptop(work: Path) -> tuple[subprocess.Popen[str], Path]:
    """The lab laptop's process (it serves the repositories and the hub until interrupted) and its
    inventory, once it says it is up."""
    process = subprocess.Popen([sys.executable, "-m", "tests.lab", "up", "--laptop", "--dir", str(work)], cwd=REPO,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + LAPTOP_READY_S
    assert process.stdout is not None
    for line in process.stdout:
        if line.startswith("laptop ") and " up in " in line:
            return process, work / "laptop.yaml"
        if time.monotonic() > deadline:
            break
    process.kill()
    raise SystemExit(f"the lab laptop did not come up (exit {process.poll()})")


def timed_up(inventory: Path, results: Path) -> tuple[float, dict]:
    elapsed, _ = run([str(BIN / "provision"), "up", str(inventory), "--json-file", str(results)])
    host = next(iter(json.loads(results.read_text())["hosts"].values()))
    return elapsed, host


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5, help="timed converged reruns (median)")
    args = parser.parse_args()
    compile_like_an_install()
    work = Path(tempfile.mkdtemp(prefix="plab-site-", dir="/var/tmp"))
    results = work / "results.json"
    process, inventory = start_laptop(work / "lab")
    try:
        first, host = timed_up(inventory, results)
        if not host["changed"]:
            raise SystemExit("the first apply changed nothing: the laptop was not fresh")
        print(f"first apply   {first:6.2f} s, {host['changed']} changed, {host['round_trips']} round trips")
        again, host = timed_up(inventory, results)
        print(f"first rerun   {again:6.2f} s, {host['changed']} changed, {host['round_trips']} round trips")
        walls, trips, elapsed = [], [], []
        for _ in range(args.repeat):
            wall, host = timed_up(inventory, results)
            if host["changed"]:
                raise SystemExit(f"a converged rerun changed {host['changed']} tasks")
            walls.append(wall)
            trips.append(host["round_trips"])
            elapsed.append(host["elapsed"])
        print(f"reruns        {statistics.median(walls):6.2f} s median ({min(walls):.2f}-{max(walls):.2f}), "
              f"round trips {sorted(set(trips))}, the host's elapsed {statistics.median(elapsed):.2f} s median")
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
        subprocess.run([sys.executable, "-m", "tests.lab", "down", "--dir", str(work / "lab")], cwd=REPO,
                       capture_output=True, check=False)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

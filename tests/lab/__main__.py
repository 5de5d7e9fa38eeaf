"""A lab for a developer: `python -m tests.lab up -n 3`, `... up --laptop`, `... status`, `... down`
(default dir `.lab`)."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import docker.errors

from tests.lab import daemon
from tests.lab.lab import Lab, unavailable_reason
from tests.lab.laptop import up_laptop


def up(lab: Lab, n: int, prefix: str) -> None:
    started = time.monotonic()
    hosts = lab.up(n, prefix)
    inventory = lab.write_inventory(lab.dir / "inventory.yaml", hosts)
    print(f"\n{n} hosts up in {time.monotonic() - started:.1f} s. Inventory: {inventory}")
    print(f"registry: 127.0.0.1:{lab.registry.port} here, {lab.registry.address_for_hosts} from the hosts")
    for host in hosts:
        print(f"  ssh -i {lab.key_file} -o UserKnownHostsFile={lab.dir / 'known_hosts'} "
              f"-p {host.ssh_port} root@127.0.0.1      # {host.name} (user deploy has sudo too)")
    print(f"stop with: python -m tests.lab down --dir {lab.dir}")


def status(lab: Lab) -> None:
    supervisor = daemon.running(lab.dir / "supervisor.pid", "tests.lab.supervisor")
    print(f"lab {lab.dir} (id {lab.id})")
    print(f"supervisor: {'pid ' + str(supervisor) if supervisor else 'not running'}")
    print(f"registry: {'127.0.0.1:' + str(lab.registry.port) if lab.registry.running() else 'not running'}")
    for host in lab.hosts():
        try:
            state = host.container.status
        except docker.errors.NotFound:
            state = "no container"
        ports = ", ".join(f"{guest}->127.0.0.1:{local}" for guest, local in host.ports.items())
        print(f"  {host.name:<10} {host.container_name:<22} {state:<12} {ports}")


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.lab", description=__doc__)
    parser.add_argument("command", choices=["up", "down", "status"])
    parser.add_argument("-n", type=int, default=3, help="number of hosts for `up` (default 3)")
    parser.add_argument("--prefix", default="lab", help="host name prefix (default lab: lab1, lab2...)")
    parser.add_argument("--laptop", action="store_true",
                        help="`up` one simulated RTX 5090 laptop with the stand-in repositories, hub and vLLM image")
    parser.add_argument("--dir", type=Path, default=Path(".lab"), help="lab directory (default .lab)")
    args = parser.parse_args()
    if args.command == "up" and (reason := unavailable_reason()):
        parser.exit(1, f"the lab cannot run here: {reason}\n")
    lab = Lab(args.dir)
    if args.command == "up" and args.laptop:
        up_laptop(lab)
    elif args.command == "up":
        up(lab, args.n, args.prefix)
    elif args.command == "down":
        lab.down()
        print(f"lab in {lab.dir} is down")
    else:
        status(lab)


if __name__ == "__main__":
    main()

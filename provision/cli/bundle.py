"""`provision bundle INVENTORY --out DIR`: gather on this (connected) machine what the inventory's
hosts need, into DIR (provision/bundle/build.py builds it: a signed apt repository per OS release, the
image, the weights, the manifest).

A host's OS release is its `bundle_os` (when the host cannot be reached from here) or is read from
the host itself (one facts probe).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from provision.bundle import manifest
from provision.bundle.build import BundleBuilder, group
from provision.bundle.needs import HostNeeds, host_needs
from provision.cli.consoles import styled
from provision.cli.inputs import Invocation, _split
from provision.errors import InputError
from provision.facts.gather import gather_facts
from provision.facts.model import HostFacts, OsInfo
from provision.inventory.model import Host, Inventory
from provision.playbook.model import Play
from provision.runner.host_run import RunOptions
from provision.secrets import Secret
from provision.settings.variables import host_variables


def declared_facts(plays: list[Play], host: Host, extra_vars: dict[str, Any]) -> dict | None:
    """The facts of a fresh host of the release its `bundle_os` names; None when it names none."""
    declared = host_variables(plays[0], host, extra_vars).get("bundle_os") or {}
    if not declared:
        return None
    facts = HostFacts(os=OsInfo(id=str(declared.get("id", "")), version_id=str(declared.get("version_id", "")),
                                codename=str(declared.get("codename", ""))), arch="x86_64",
                      kernel=str(declared.get("kernel", ""))).as_vars()
    if not facts["kernel"]:
        # unknown, not empty: a package named after the kernel (the DKMS headers) is then reported
        # as not known before the run, never bundled as "linux-headers-"
        del facts["kernel"]
    return facts


def read_facts(inv: Invocation, hosts: list[Host]) -> dict[str, dict]:
    """The hosts' own facts, read through the runner (each host must be reachable from here)."""
    readings = inv.read_each(hosts, lambda _, conn: gather_facts(conn).as_vars())
    for name, reading in readings.items():
        if reading.value is None:
            raise InputError(f"host {name}: its OS release is not known ({reading.exception}); set bundle_os "
                             "(e.g. {id: debian, version_id: '12', codename: bookworm}) for a host this machine "
                             "cannot reach", key="bundle_os") from reading.exception
    return {name: reading.value for name, reading in readings.items() if reading.value is not None}


def target_facts(plays: list[Play], host: Host, extra_vars: dict[str, Any], inv: Invocation) -> dict:
    """The facts a host's needs are read with: its `bundle_os` (a fresh host of that release), else
    the host's own."""
    declared = declared_facts(plays, host, extra_vars)
    return declared if declared is not None else read_facts(inv, [host])[host.name]


def all_needs(inv: Invocation, inventory: Inventory, hosts: list[Host], plays: list[Play],
              extra_vars: dict[str, Any]) -> list[HostNeeds]:
    options = RunOptions(tags=_split(inv.args.tags), skip_tags=_split(inv.args.skip_tags))
    facts = {host.name: declared_facts(plays, host, extra_vars) for host in hosts}
    read = read_facts(inv, [host for host in hosts if facts[host.name] is None])
    return [host_needs(plays, inventory, host, facts[host.name] or read[host.name], extra_vars, options)
            for host in hosts]


def cmd_bundle(inv: Invocation) -> int:
    args, console, extra_vars = inv.args, inv.console, inv.extra_vars
    inventory, hosts = inv.validated()
    inventory.check_problems(hosts)  # a host is read (target_facts) only at the address its settings give
    plays = inv.plays
    needs = all_needs(inv, inventory, hosts, plays, extra_vars)
    for need in needs:
        for task in need.unresolved:
            console.print(styled("warning:", "yellow", f" host {need.host}: packages of {task} are not known before"
                                 " the run and are not in the bundle"), highlight=False, soft_wrap=True)
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    (out / manifest.MANIFEST).unlink(missing_ok=True)
    started = time.monotonic()
    builder = BundleBuilder(out, args.key_dir.expanduser(), console)
    releases, images, wanted = group(needs)
    by_name = {host.name: host for host in hosts}
    with builder.progress:
        builder.urls(needs)
        for release, members in sorted(releases.items()):
            variables = host_variables(plays[0], by_name[members[0].host], extra_vars)
            release_image = (variables.get("bundle_release_images") or {}).get(release)
            if not release_image:
                raise InputError(f"no container image for {release} to resolve its packages in: add it to "
                                 "bundle_release_images", key="bundle_release_images")
            builder.apt(release, members, release_image)
        for reference, names in sorted(images.items()):
            builder.image(reference, names)
        for item, names in sorted(wanted.items(), key=lambda kv: str(kv[0])):
            variables = host_variables(plays[-1], by_name[names[0]], extra_vars)
            token = variables.get("hf_token") or None
            builder.weights(item, names, str(variables.get("hf_endpoint", "https://huggingface.co")),
                            token if token is None or isinstance(token, Secret) else Secret(str(token)),
                            variables.get("office_cache_trusted") is True)
        builder.verify_and_write()
    size = builder.manifest.size
    console.print(f"bundle {out}: {len(builder.manifest.files)} files, {size / 1024**2:.1f} MiB, "
                  f"for {len(hosts)} hosts ({', '.join(sorted(releases)) or 'no apt packages'}) in "
                  f"{time.monotonic() - started:.1f} s; signing key {builder.manifest.key_fingerprint or '-'}",
                  highlight=False, soft_wrap=True)
    return 0

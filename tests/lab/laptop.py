"""`python -m tests.lab up --laptop`: one simulated RTX 5090 laptop to run the whole tool on by hand.

A fresh lab host with the stand-in GPU traits, the stand-in NVIDIA repositories and Hugging Face hub
served from this machine, the stand-in vLLM image in the lab registry, and `DIR/laptop.yaml`: the
inventory an office with its own mirrors would write. The repositories and the hub are served by
this process: it stays in the foreground until Ctrl-C (the host stays until `python -m tests.lab down`).
"""

from __future__ import annotations

import base64
import secrets
import shlex
import subprocess
import time
from pathlib import Path

import yaml

from tests.lab.host import Bind, LabHost
from tests.lab.lab import Lab
from tests.lab.net import MACHINE_FROM_HOSTS, free_port
from tests.standins.hub.cli import start_hub
from tests.standins.hub.server import HubOptions
from tests.standins.nvidia import HostTraits, build_repo, host_traits_files, host_traits_mounts, serve
from tests.standins.vllm.build import build_images

CHECK_IMAGE = "standin-gpu-check:1"
FIRST_REPO_PORT = 18865
MODEL_REPO = "cyankiwi/gemma-4-26B-A4B-it-AWQ-4bit"


def check_image(lab: Lab, workdir: Path) -> str:
    """A busybox image with every applet (the stand-in nvidia-smi is a shell script that needs sed,
    tr, cut, ...), pushed to the lab registry; returns the reference hosts pull it by."""
    root = workdir / "root"
    for folder in ("bin", "etc", "tmp", "proc", "sys", "dev", "run", "usr/bin"):
        (root / folder).mkdir(parents=True, exist_ok=True)
    busybox = root / "bin/busybox"
    busybox.write_bytes(Path("/bin/busybox").read_bytes())
    busybox.chmod(0o755)
    applets = subprocess.run([str(busybox), "--list"], capture_output=True, text=True, check=True).stdout.split()
    for applet in applets:
        link = root / "bin" / applet
        if not link.exists():
            link.symlink_to("busybox")
    archive = workdir / "image.tar"
    subprocess.run(["tar", "-C", str(root), "-cf", str(archive), "."], check=True)
    subprocess.run(["docker", "import", str(archive), f"provision-test/{CHECK_IMAGE}"], check=True,
                   capture_output=True)
    return lab.registry.push(f"provision-test/{CHECK_IMAGE}", CHECK_IMAGE)


def gpu_laptop(lab: Lab, workdir: Path, traits: HostTraits, prefix: str = "laptop",
               suite: str = "bookworm", offline: bool = False) -> LabHost:
    """A fresh lab host (Debian `suite`) with the simulated hardware of `traits` written in before its
    first use; `offline`: its egress allows only its SSH server's replies (see Lab.new_host)."""
    binds = [Bind(str(m.source), m.target, m.read_only) for m in host_traits_mounts(traits, workdir)]
    host = lab.new_host(prefix=prefix, binds=binds, suite=suite, offline=offline)
    for item in host_traits_files(traits):
        data = base64.b64encode(item.content).decode()
        path = shlex.quote(item.path)
        rc, out = host.exec(f"mkdir -p $(dirname {path}) && echo {data} | base64 -d > {path} && "
                            f"chmod {item.mode:o} {path}")
        if rc != 0:
            raise RuntimeError(f"writing {item.path} on {host.name}: {out}")
    return host


def up_laptop(lab: Lab) -> None:
    started = time.monotonic()
    lab.start()
    work = lab.dir / "laptop"
    work.mkdir(parents=True, exist_ok=True)
    print("building the stand-in vLLM image and the GPU check image ...", flush=True)
    images = build_images(f"127.0.0.1:{lab.registry.port}", pull_registry=lab.registry.address_for_hosts,
                          behaviours=("ok",), log=lambda _: None)
    checker = check_image(lab, work)
    port = free_port(FIRST_REPO_PORT, set())
    repo = build_repo(work / "nvidia-repo", f"http://{MACHINE_FROM_HOSTS}:{port}")
    repo_server = serve(repo.out_dir, port)
    token = "hf_standin_" + secrets.token_hex(12)
    hub = start_hub(work / "hub", repo_id=MODEL_REPO, options=HubOptions(token=token))
    host = gpu_laptop(lab, work / "traits", HostTraits(nouveau_at_boot=False))
    inventory = lab.write_inventory(lab.dir / "laptop.yaml", [host], **{
        "nvidia_cuda_repo_base": repo.cuda_repos_base, "nvidia_container_repo_base": repo.container_toolkit_base,
        "nvidia_kernel_headers": {"debian": [], "ubuntu": []}, "nvidia_dkms_packages": [],
        "docker_insecure_registries": [lab.registry.address_for_hosts], "container_toolkit_check_image": checker,
        "container_toolkit_check_cuda": False,
        "hf_endpoint": f"http://{MACHINE_FROM_HOSTS}:{hub.server.server_address[1]}", "hf_token": token,
        "office_cache_trusted": True,
        "vllm_image": images["ok"], "vllm_ready_timeout": 300})
    print(f"\nlaptop {host.name} up in {time.monotonic() - started:.0f} s; inventory {inventory}:")
    shown = {**yaml.safe_load(inventory.read_text())["all"]["vars"], "hf_token": "*** (in the file)"}
    print(yaml.safe_dump(shown, sort_keys=False))
    print(f"in another shell:\n  provision up {inventory}\n  provision status {inventory}\n"
          f"  provision bench {inventory} --runs 3 --max-tokens 200\n"
          f"  provision up {inventory} -e max_num_seqs=3    # an upgrade\n  provision rollback {inventory}")
    print(f"Ctrl-C stops the repositories and the hub; `python -m tests.lab down --dir {lab.dir}` the host.",
          flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        hub.stop()
        repo_server.stop()

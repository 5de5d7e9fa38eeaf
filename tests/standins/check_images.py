"""One-off check of the stand-in images on this machine's docker (not a unit test; needs docker).

    python -m tests.standins.check_images

1. starts a private docker-registry on 127.0.0.1:5055 (storage in a temp dir), builds every variant
   and pushes it there, then pulls `standin-ok` back by its registry reference;
2. starts the stand-in hub on the docker bridge gateway (this machine's own address on docker0) and
   runs the image's real `hf download` against it into a host cache folder;
3. runs the ok image with that cache mounted, published on 127.0.0.1 only, and checks /health,
   /v1/models, a vision answer and streamed throughput; runs kv-cache-too-small and checks it fails;
4. prints timings and the image size, then stops everything it started.
"""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import docker

from tests.standins.hub.cli import start_hub
from tests.standins.vllm.build import build_images
from tests.standins.vllm.launch import free_port
from tests.unit.test_standin_vllm import gradient, stream_chat

REGISTRY = "127.0.0.1:5055"
REPO = "cyankiwi/gemma-4-26B-A4B-it-AWQ-4bit"
SERVE_ARGS = [REPO, "--served-model-name", "gemma", "--api-key", "sekrit", "--host", "0.0.0.0", "--port", "8000",
              "--attention-backend", "TRITON_ATTN", "--kv-cache-dtype", "fp8", "--max-model-len", "131072",
              "--gpu-memory-utilization", "0.92", "--max-num-seqs", "4", "--max-num-batched-tokens", "8192",
              "--enable-prefix-caching", "--limit-mm-per-prompt", '{"image":1,"video":0}']


def timed(label: str, timings: dict[str, float], started: float) -> None:
    timings[label] = round(time.monotonic() - started, 2)
    print(f"{label}: {timings[label]} s", flush=True)


def wait_http(url: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2) as reply:
                if reply.status == 200:
                    return
        except OSError:
            time.sleep(0.2)
    raise TimeoutError(url)


def main() -> int:
    client = docker.from_env()
    timings: dict[str, float] = {}
    work = Path(tempfile.mkdtemp(prefix="standin-check-"))
    (work / "registry.yml").write_text(
        f"version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: {work / 'registry'}\n"
        f"http:\n  addr: {REGISTRY}\n  secret: standin-check\n")
    registry = subprocess.Popen(["docker-registry", "serve", str(work / "registry.yml")],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    containers: list[str] = []
    hub = None
    try:
        wait_http(f"http://{REGISTRY}/v2/", 10)
        started = time.monotonic()
        refs = build_images(REGISTRY, log=lambda line: None)
        timed("build and push 7 variants", timings, started)
        client.images.remove(refs["ok"], force=True)
        started = time.monotonic()
        client.images.pull(refs["ok"])
        timed("pull standin-ok from the registry", timings, started)
        image = refs["ok"]
        size_mib = client.images.get(image).attrs["Size"] / 2**20
        print(f"image {image}: {size_mib:.0f} MiB; refs: {json.dumps(refs)}")

        bridge = subprocess.run(["ip", "-4", "-o", "addr", "show", "docker0"], capture_output=True, text=True)
        gateway = bridge.stdout.split("inet ")[1].split("/")[0]  # this machine's own address on docker0
        hub = start_hub(work / "hub-repo", shard_size=64 * 2**20, host=gateway)
        cache = work / "hf-cache"
        cache.mkdir()
        started = time.monotonic()
        subprocess.run(["docker", "run", "--rm", "--entrypoint", "hf", "-v", f"{cache}:/root/.cache/huggingface",
                        "-e", f"HF_ENDPOINT={hub.url}", "-e", "HF_HUB_DISABLE_UPDATE_CHECK=1", image,
                        "download", REPO, "--revision", "main"], check=True, capture_output=True, text=True)
        timed("hf download (2 x 64 MiB) inside the image", timings, started)

        port = free_port()
        started = time.monotonic()
        container = subprocess.run(["docker", "run", "-d", "-p", f"127.0.0.1:{port}:8000",
                                    "-v", f"{cache}:/root/.cache/huggingface", image, *SERVE_ARGS],
                                   check=True, capture_output=True, text=True).stdout.strip()
        containers.append(container)
        wait_http(f"http://127.0.0.1:{port}/health", 60)
        timed("container start to /health 200", timings, started)
        auth = {"Authorization": "Bearer sekrit", "Content-Type": "application/json"}
        with urllib.request.urlopen(urllib.request.Request(f"http://127.0.0.1:{port}/v1/models", headers=auth)) as r:
            print("models:", [m["id"] for m in json.load(r)["data"]])
        body = {"model": "gemma", "temperature": 0, "max_tokens": 5, "messages": [{"role": "user", "content": [
            {"type": "text", "text": "Colour?"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,"
                                                       + base64.b64encode(gradient("red")).decode()}}]}]}
        started = time.monotonic()
        request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions",
                                         data=json.dumps(body).encode(), headers=auth)
        with urllib.request.urlopen(request) as reply:
            print("vision answer:", json.load(reply)["choices"][0]["message"]["content"])
        timed("vision request", timings, started)
        started = time.monotonic()
        _, token_times = stream_chat(f"http://127.0.0.1:{port}", {
            "model": "gemma", "messages": [{"role": "user", "content": "go"}], "max_tokens": 280, "ignore_eos": True})
        print(f"decode rate: {(len(token_times) - 1) / (token_times[-1] - token_times[0]):.1f} tok/s")
        timed("280-token stream", timings, started)
        logs = subprocess.run(["docker", "logs", container], capture_output=True, text=True).stdout
        print("\n".join(line for line in logs.splitlines() if "KV cache" in line or "startup complete" in line))

        started = time.monotonic()
        failing = subprocess.run(["docker", "run", "--rm", "-v", f"{cache}:/root/.cache/huggingface",
                                  refs["kv-cache-too-small"], *SERVE_ARGS],
                                 capture_output=True, text=True)
        timed("kv-cache-too-small run", timings, started)
        assert failing.returncode == 1, failing.returncode
        assert "KV cache is needed" in failing.stdout + failing.stderr
        print("kv-cache-too-small exit status:", failing.returncode)
    finally:
        for container in containers:
            subprocess.run(["docker", "rm", "-f", container], capture_output=True)
        if hub is not None:
            hub.stop()
        registry.terminate()
        registry.wait(timeout=10)
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(timings, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

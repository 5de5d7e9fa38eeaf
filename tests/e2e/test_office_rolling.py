"""A rolling upgrade of an office under steady load: three lab backends each serving the stand-in vLLM
image (tests/standins/vllm: vLLM's OpenAI API, /health, SSE chunks; the image from the lab registry,
the weights from the stand-in hub) through docker and the vllm role, one gateway host running HAProxy
(roles/office_gateway). Threads stream chat completions through the gateway without pause while `up`
changes every backend's release: each backend is drained at the gateway, swapped, checked and put
back, one at a time, and no request fails.

With PROVISION_ROLLING_COMPARE=1 the same load meets a second release change made with
`office_rolling_drain: false` (the tool before this change: the swap in service), for the figure
side by side (printed with -s, kept in benchmarks/office_rolling.md).

The backends are not GPU hosts: they get docker and the vllm role only (`--tags docker,vllm`), and the
container needs no GPU (`vllm_docker_run_options` without the GPU request)."""

from __future__ import annotations

import http.client
import json
import os
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from provision.office_gateway.admin import admin_script, parse_view
from provision.office_gateway.rotation import drain_script, marked_script
from tests.e2e.helpers import Run, provision
from tests.lab import Lab, LabHost
from tests.lab.net import MACHINE_FROM_HOSTS
from tests.standins.hub.cli import RunningHub, start_hub
from tests.standins.vllm.build import build_images

pytestmark = pytest.mark.lab

VLLM_PORT = 8000
GATEWAY_PORT = 8000
API_KEY = "sk-office-rolling-0123456789"
# test_serving's image variant (the same tag in the lab registry): ready a second after start
STANDIN_ENV = {"STANDIN_READY_DELAY": "1", "STANDIN_TOKENS_PER_S": "2000"}
TOKENS_PER_S = 40        # each stream: 40 tokens at 40 tokens/s, about a second in flight
STREAM_TOKENS = 40
USERS = 6                # threads streaming without pause (the 3 backends take 4 each)
MIB = 1024 * 1024


class Office:
    def __init__(self, tmp: Path, inventory: Path, gateway: LabHost, backends: list[LabHost]) -> None:
        self.tmp, self.inventory, self.gateway, self.backends = tmp, inventory, gateway, backends
        self.url = f"http://127.0.0.1:{gateway.port(GATEWAY_PORT)}/v1"
        self.names = [host.name for host in backends]

    def servers(self) -> dict[str, str]:
        _, output = self.gateway.exec(admin_script("/run/haproxy/admin.sock", "show"))
        return {server.name: server.status for server in parse_view(output)[0]}

    def set_release(self, release: str) -> None:
        """A new release of every backend: the container's options change (a restart of the service)."""
        document = yaml.safe_load(self.inventory.read_text())
        document["all"]["vars"]["vllm_docker_run_options"] = [
            "--ipc=host", "-e", f"STANDIN_TOKENS_PER_S={TOKENS_PER_S}", "-e", f"OFFICE_RELEASE={release}"]
        self.inventory.write_text(yaml.safe_dump(document, sort_keys=False))

    def up(self, name: str, *args: str) -> Run:
        run = provision("up", str(self.inventory), *args, json_path=self.tmp / f"{name}.json")
        (self.tmp / f"{name}.out").write_text(run.output)
        return run

    def stream(self) -> str | None:
        """One streamed completion through the gateway: None when it came whole, else what went wrong."""
        body = {"model": "workhorse", "max_tokens": STREAM_TOKENS, "stream": True, "ignore_eos": True,
                "messages": [{"role": "user", "content": "hello"}]}
        request = urllib.request.Request(f"{self.url}/chat/completions", data=json.dumps(body).encode(),
                                         headers={"Authorization": f"Bearer {API_KEY}",
                                                  "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                text = response.read().decode()
        except urllib.error.HTTPError as error:
            return f"HTTP {error.code}"
        except (OSError, http.client.HTTPException) as error:  # refused, reset, or cut mid-stream
            return f"{type(error).__name__}"
        chunks = text.count('"chat.completion.chunk"')
        return None if text.rstrip().endswith("data: [DONE]") and chunks >= STREAM_TOKENS else \
            f"cut after {chunks} chunks"


class Load:
    """USERS threads streaming without pause, and a sampler of the gateway's view of each backend."""

    def __init__(self, office: Office) -> None:
        self.office = office
        self.stop = threading.Event()
        self.ok = 0
        self.failed: list[str] = []
        self.samples: list[dict[str, str]] = []
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self.user, daemon=True) for _ in range(USERS)]
        self.threads.append(threading.Thread(target=self.sample, daemon=True))

    def user(self) -> None:
        while not self.stop.is_set():
            problem = self.office.stream()
            with self.lock:
                if problem is None:
                    self.ok += 1
                else:
                    self.failed.append(problem)
            if problem is not None:
                time.sleep(0.5)  # a client's pause before it asks again (a failure is often instant)

    def sample(self) -> None:
        while not self.stop.is_set():
            self.samples.append(self.office.servers())
            time.sleep(0.1)

    def __enter__(self) -> Load:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *_: Any) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=90)

    def figure(self) -> str:
        kinds = {kind: self.failed.count(kind) for kind in sorted(set(self.failed))}
        return f"{len(self.failed)} failed of {self.ok + len(self.failed)}" + (f" {kinds}" if kinds else "")


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningHub]:
    running = start_hub(tmp_path_factory.mktemp("hub") / "repo", shard_size=2 * MIB, shards=2)
    yield running
    running.stop()


@pytest.fixture(scope="module")
def office(lab: Lab, hub: RunningHub, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Office]:
    """Three backends serving release 1 through docker and the vllm role, and the gateway in front."""
    started = time.monotonic()
    tmp = tmp_path_factory.mktemp("office-rolling")
    image = build_images(f"127.0.0.1:{lab.registry.port}", pull_registry=lab.registry.address_for_hosts,
                         behaviours=("ok",), env=STANDIN_ENV, log=lambda _: None)["ok"]
    gateway, *backends = lab.new_host_set({"prefix": "orgw", "extra_ports": [GATEWAY_PORT]},
                                          *[{"prefix": "orbk", "extra_ports": [VLLM_PORT]}] * 3)
    inventory = lab.write_inventory(
        tmp / "office.yaml", [gateway, *backends],
        hf_endpoint=f"http://{MACHINE_FROM_HOSTS}:{hub.server.server_address[1]}", vllm_image=image,
        served_model_name="workhorse", vllm_api_key=API_KEY, vllm_ready_timeout=120, smoke_timeout=60,
        docker_insecure_registries=[lab.registry.address_for_hosts])
    document = yaml.safe_load(inventory.read_text())
    document["all"]["children"] = {"office_gateway": {"hosts": {gateway.name: None}},
                                   "desks": {"hosts": dict.fromkeys(host.name for host in backends)}}
    for host in backends:
        document["all"]["hosts"][host.name].update(office_gateway_backend_address=MACHINE_FROM_HOSTS,
                                                   office_gateway_backend_port=host.port(VLLM_PORT))
    inventory.write_text(yaml.safe_dump(document, sort_keys=False))
    office = Office(tmp, inventory, gateway, backends)
    office.set_release("1")
    first = office.up("first", "--limit", "desks", "--tags", "docker,vllm")
    assert first.returncode == 0, first.output[-6000:]
    # the gateway did not exist yet: the first releases were not drained, and said why
    assert "serves no request yet" in json.dumps(first.results), first.output[-3000:]
    front = office.up("gateway", "--limit", gateway.name, "--tags", "office_gateway")
    assert front.returncode == 0, front.output[-6000:]
    deadline = time.monotonic() + 30
    while set(office.servers().values()) != {"UP"} and time.monotonic() < deadline:
        time.sleep(0.2)
    assert set(office.servers().values()) == {"UP"}, office.servers()
    print(f"\noffice of 3 backends and a gateway ready in {time.monotonic() - started:.0f} s")
    yield office


def released(run: Run, host: str) -> str:
    return next(task["summary"] for task in run.host(host)["tasks"]
                if task["name"] == "vLLM service released and checked")


def roll(office: Office, release: str, *args: str) -> tuple[Run, Load, float]:
    office.set_release(release)
    with Load(office) as load:
        time.sleep(2)  # the load is steady before the roll starts
        started = time.monotonic()
        run = office.up(f"roll-{release}", "--limit", "desks", "--tags", "vllm", *args)
        took = time.monotonic() - started
        time.sleep(2)
    return run, load, took


def test_a_rolling_upgrade_under_steady_load_fails_no_request(office: Office) -> None:
    run, load, took = roll(office, "2")
    assert run.returncode == 0, run.output[-6000:]
    print(f"rolling upgrade of 3 backends under {USERS} streaming users: {load.figure()} in {took:.0f} s")
    for name in office.names:
        assert "vLLM service released and checked" in run.changed_tasks(name)
        summary = released(run, name)
        assert "drained at " in summary and "no request in flight" in summary and "back in rotation at" in summary, \
            summary
    assert load.failed == [] and load.ok > 30, load.figure()
    # one backend out of rotation at a time, and each of them was
    out = [[name for name, status in sample.items() if status != "UP"] for sample in load.samples]
    assert max(len(names) for names in out) == 1, [names for names in out if len(names) > 1][:5]
    assert {names[0] for names in out if names} == set(office.names)
    assert set(office.servers().values()) == {"UP"}


def test_a_backend_a_killed_run_left_drained_is_put_back_by_the_next_up(office: Office) -> None:
    victim = office.names[1]
    # what a run killed between its drain and its undrain leaves on the gateway: the marker, the drain
    rc, output = office.gateway.exec(drain_script("/run/haproxy/admin.sock", victim, 5))
    assert rc == 0 and office.servers()[victim] == "DRAIN", output
    rerun = office.up("rerun", "--limit", "desks", "--tags", "vllm")
    assert rerun.returncode == 0 and all(rerun.changed_tasks(name) == [] for name in office.names), rerun.output
    summary = released(rerun, victim)
    assert "back in rotation at" in summary and "left drained by an earlier run" in summary, summary
    assert office.servers()[victim] == "UP"
    assert office.gateway.exec(marked_script(victim))[1].strip() == "clear"
    # a drain by hand (no marker) is the user's: up leaves it
    rc, output = office.gateway.exec(admin_script("/run/haproxy/admin.sock", "drain", victim, 5))
    assert rc == 0, output
    assert office.up("by-hand", "--limit", "desks", "--tags", "vllm").returncode == 0
    assert office.servers()[victim] == "DRAIN"
    assert office.gateway.exec(admin_script("/run/haproxy/admin.sock", "ready", victim))[0] == 0


@pytest.mark.skipif(os.environ.get("PROVISION_ROLLING_COMPARE") != "1",
                    reason="the side-by-side figure: PROVISION_ROLLING_COMPARE=1")
def test_side_by_side_the_same_roll_without_the_drain(office: Office) -> None:
    drained, with_drain, _ = roll(office, "3")
    assert drained.returncode == 0, drained.output[-6000:]
    # the tool before: no drain, every backend swapped at once (forks), or one at a time with --serial 1
    at_once, without, _ = roll(office, "4", "-e", "office_rolling_drain=false")
    assert at_once.returncode == 0, at_once.output[-6000:]
    serial, one_by_one, _ = roll(office, "5", "-e", "office_rolling_drain=false", "--serial", "1")
    assert serial.returncode == 0, serial.output[-6000:]
    print(f"rolling upgrade of 3 backends, {USERS} streaming users: with the drain {with_drain.figure()}; "
          f"without it (office_rolling_drain: false), all at once: {without.figure()}; one at a time "
          f"(--serial 1): {one_by_one.figure()}")
    assert with_drain.failed == [] and without.failed and one_by_one.failed

"""`provision up` to a served, checked model on a lab laptop: weights from the stand-in hub, the
stand-in vLLM image from the lab registry, the unit, readiness, text and vision smoke; reruns that
change nothing; a flag change that restarts once; failing upgrades (a fatal log line, a wrong vision
answer) rolled back; `provision rollback`, `smoke` and `render`; secrets nowhere.

The host is a simulated RTX 5090 laptop whose GPU stack the tool itself provisions (the GPU roles of
site.yaml, via the shared gpu_host/gpu_inventory fixtures), so the first run is a whole `provision up`.
The steps build on each other through module fixtures, so any single test can run alone.
"""

from __future__ import annotations

import base64
import json
import re
import secrets
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from provision.shell import quote
from tests.e2e.helpers import Run, provision, sh
from tests.lab import Lab, LabHost
from tests.lab.net import MACHINE_FROM_HOSTS
from tests.standins.hub.cli import RunningHub, start_hub
from tests.standins.hub.server import HubOptions, read_request_log
from tests.standins.nvidia import HostTraits
from tests.standins.vllm.build import build_images
from tests.standins.vllm.server import FAILURES, parse_command_line

pytestmark = pytest.mark.lab

MIB = 1024 * 1024
REPO = "cyankiwi/gemma-4-26B-A4B-it-AWQ-4bit"
SERVED = "workhorse"
HF_TOKEN = "hf_standin_" + secrets.token_hex(12)
SERVING = "model,vllm,smoke"
RELEASE_TASK = "vLLM service released and checked"
KEY_FILE = "/etc/provision/vllm/api-key"
UNIT = "/etc/systemd/system/vllm.service"
# fast stand-ins: ready a second after start, 2000 tokens/s
STANDIN_ENV = {"STANDIN_READY_DELAY": "1", "STANDIN_TOKENS_PER_S": "2000"}


def started_at(host: LabHost) -> str:
    return sh(host, "docker inspect -f '{{.State.StartedAt}}' vllm")


@pytest.fixture(scope="session")
def vllm_images(lab: Lab) -> dict[str, str]:
    """The stand-in vLLM variants the tests deploy, pushed to the lab registry (hosts' references)."""
    return build_images(f"127.0.0.1:{lab.registry.port}", pull_registry=lab.registry.address_for_hosts,
                        behaviours=("ok", *FAILURES, "wrong-vision"), env=STANDIN_ENV, log=lambda _: None)


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningHub]:
    """The stand-in hub (token required), reached by lab hosts as 10.0.2.2:PORT."""
    tmp = tmp_path_factory.mktemp("hub")
    running = start_hub(tmp / "repo", shard_size=2 * MIB, shards=2,
                        options=HubOptions(token=HF_TOKEN, request_log=tmp / "requests.jsonl"))
    yield running
    running.stop()


def hub_endpoint(hub: RunningHub) -> str:
    return f"http://{MACHINE_FROM_HOSTS}:{hub.server.server_address[1]}"


class Laptop:
    """The host, its inventory and every run made against it (for the secrets check at the end)."""

    def __init__(self, host: LabHost, tmp: Path, write_inventory: Any, base_vars: dict[str, Any]) -> None:
        self.host = host
        self.tmp = tmp
        self.write_inventory = write_inventory
        self.base_vars = base_vars
        self.runs: list[Run] = []
        self.timings: list[str] = []
        self.cache = tmp / "controller-cache"  # this laptop's runs' own, searched for secrets at the end
        self.env = {"PROVISION_CACHE_DIR": str(self.cache)}
        self.inventory = self.set_vars()

    def set_vars(self, **overrides: Any) -> Path:
        self.inventory = self.write_inventory(self.tmp / "inventory.yaml", [self.host], **{**self.base_vars,
                                                                                          **overrides})
        return self.inventory

    def run(self, *args: str, name: str) -> Run:
        started = time.monotonic()
        run = provision(*args, json_path=self.tmp / f"{name}.json", env=self.env)
        (self.tmp / f"{name}.out").write_text(run.output)
        host = (run.results or {}).get("hosts", {}).get(self.host.name, {})
        self.timings.append(f"{name}: {time.monotonic() - started:.1f}s, exit {run.returncode}, "
                            f"changed {host.get('changed')}, round trips {host.get('round_trips')}")
        self.runs.append(run)
        return run

    def up(self, name: str, *args: str) -> Run:
        return self.run("up", str(self.inventory), *args, name=name)


@pytest.fixture(scope="module")
def laptop(gpu_host, gpu_inventory, vllm_images, hub, tmp_path_factory) -> Iterator[Laptop]:
    tmp = tmp_path_factory.mktemp("serving")
    host = gpu_host(HostTraits(), prefix="serve")
    base = {"hf_endpoint": hub_endpoint(hub), "hf_token": HF_TOKEN, "office_cache_trusted": True,
            "vllm_image": vllm_images["ok"],
            "served_model_name": SERVED, "vllm_ready_timeout": 180, "smoke_timeout": 60,
            # the stand-in image and weights take MiB, not the real 60 GiB; the lab's hosts share this
            # machine's disk, which the whole suite fills (58 GiB free was seen at this point of a CI run)
            "preflight_min_free_gib": 5}
    laptop = Laptop(host, tmp, gpu_inventory, base)
    yield laptop
    print("\nserving runs:\n  " + "\n  ".join(laptop.timings))  # shown with -s


@pytest.fixture(scope="module")
def served(laptop: Laptop) -> dict[str, Any]:
    """`provision up --check` of a fresh laptop, the whole `provision up`, then a rerun."""
    check = laptop.up("check", "--check")
    first = laptop.up("first")
    key = sh(laptop.host, f"cat {KEY_FILE}") if first.returncode == 0 else ""
    start_1 = started_at(laptop.host) if first.returncode == 0 else ""
    second = laptop.up("second")
    assert first.returncode == 0 and second.returncode == 0, (first.output + second.output)[-6000:]
    start_2 = started_at(laptop.host)
    third = laptop.up("third")
    return {"check": check, "first": first, "second": second, "third": third, "key": key, "start_1": start_1,
            "start_2": start_2}


def test_first_up_downloads_pulls_starts_and_passes_both_smoke_checks(served, laptop, hub, vllm_images):
    first, host = served["first"], laptop.host
    assert first.returncode == 0, first.output
    changed = first.changed_tasks(host.name)
    assert {"model weights downloaded and verified", "vLLM image pulled", RELEASE_TASK} <= set(changed)
    release = next(t for t in first.host(host.name)["tasks"] if t["name"] == RELEASE_TASK)
    assert "first release" in release["summary"]
    assert "text " in release["summary"] and "vision " in release["summary"] and "'Red." in release["summary"]
    # every file of the repository, each fetched once, with the token
    gets = [r for r in hub.state.requests if "/resolve/" in r["path"] and r["method"] == "GET"]
    assert sorted(r["path"].rsplit("/", 1)[1] for r in gets) == sorted(f.path for f in hub.repository.files)
    assert {r["authorization"] for r in hub.state.requests} == {"valid"}
    assert sh(host, "systemctl is-active vllm; systemctl is-enabled vllm").split() == ["active", "enabled"]
    image = sh(host, "docker inspect -f '{{.Config.Image}}' vllm")
    assert image.startswith(vllm_images["ok"].rsplit(":", 1)[0] + "@sha256:"), "the unit runs the image by digest"
    record = json.loads(sh(host, "cat /var/lib/provision/vllm/release.json"))
    assert record["current"]["pinned_image"] == image and record["previous"] is None
    assert record["current"]["weights"] == {"repo": REPO, "revision": "main", "commit": hub.repository.commit}


def test_the_weights_download_starts_in_a_host_unit_beside_the_drivers_apt_work(served, laptop):
    first, host = served["first"], laptop.host
    tasks = {task["name"]: task for task in first.host(host.name)["tasks"]}
    weights, driver = tasks["model weights downloaded and verified"], tasks["NVIDIA open driver installed and held"]
    assert weights["status"] == "changed" and weights["early"]["after"] == "office_cache_client"
    assert weights["early"]["started"] < driver["started"] + driver["elapsed"], \
        "the download did not start before the driver's apt work ended"
    assert weights["started"] > driver["started"] + driver["elapsed"], "the task waits at its turn"
    # the recap's timeline says where the time went, in plain lines (this run has no terminal)
    assert f"timeline of {host.name}" in first.output
    assert "background: model weights downloaded and verified (host unit provision-early-" in first.output
    print("\n".join(line for line in first.output.splitlines() if line.startswith(("timeline of", "   "))))
    timeline = first.host(host.name)["timeline"]
    background = [phase for phase in timeline if phase["background"]]
    assert [phase["phase"].split(" (")[0] for phase in background] == ["model weights downloaded and verified",
                                                                       "vLLM image pulled"]
    # the image pull starts once dockerd's restart (the host stack's handler) is behind it: a restart
    # ends a pull in progress, and dockerd fetches its unfinished layers again (benchmarks/RESULTS.md)
    pull, restart = tasks["vLLM image pulled"], tasks["restart docker"]
    assert restart["status"] == "changed"
    assert pull["early"]["after"] == "docker" and pull["early"]["started"] > restart["started"] + restart["elapsed"]
    assert any(wait["for"] == "model weights downloaded and verified" for phase in timeline
               for wait in phase["waited"])
    # the unit, its file and its script (which held the token) are gone
    assert sh(host, "ls -A /var/lib/provision/early; ls /etc/systemd/system | grep -c provision-early || true") == "0"


def test_planned_and_found_memory_are_reported_and_recorded(served, laptop):
    tasks = served["first"].host(laptop.host.name)["tasks"]
    memory = next(t for t in tasks if t["name"] == "vLLM memory, planned vs found")
    assert not memory["changed"]
    assert "KV cache planned" in memory["summary"] and "vLLM found" in memory["summary"]
    assert memory["data"]["found_kv_available_gib"] > 0 and memory["data"]["planned_kv_available_gib"] > 0
    # v0.21 prints the concurrency on its own line: the journal filter must keep it
    assert memory["data"]["found_max_concurrency"] > 0 and "full-length sequences planned" in memory["summary"]
    assert "WARNING" not in memory["summary"], "the stand-in finds what the plan expects"
    record = json.loads(sh(laptop.host, "cat /var/lib/provision/vllm/release.json"))
    assert record["current"]["startup_memory"]["kv_available_gib"] == memory["data"]["found_kv_available_gib"]


def serving_tasks(run: Run, host: str) -> list[str]:
    return [t["name"] for t in run.host(host)["tasks"] if t["changed"] and t["role"] in ("model", "vllm", "smoke")]


def test_check_mode_predicts_the_serving_changes_exactly(served, laptop):
    check, name = served["check"], laptop.host.name
    assert check.returncode == 0, check.output
    assert serving_tasks(check, name) == serving_tasks(served["first"], name) == [
        "model weights downloaded and verified", "vLLM image pulled", "vLLM API key generated once and kept",
        RELEASE_TASK]


def test_the_unit_is_the_seed_configuration(served, laptop):
    assert served["first"].returncode == 0
    unit = sh(laptop.host, f"cat {UNIT}")
    for line in ("Restart=always", "StartLimitBurst=5", "ExecStartPre=-/usr/bin/docker rm -f vllm",
                 "ExecStop=/usr/bin/docker stop -t 135 vllm", "--shutdown-timeout 120",
                 "--gpus all", "--ipc=host", "-p 8000:8000",
                 "-v /var/lib/provision/huggingface:/root/.cache/huggingface",
                 "--env-file /etc/provision/vllm/vllm.env",
                 f"{REPO} \\", "--revision main", "--max-model-len 131072", "--attention-backend TRITON_ATTN",
                 "--kv-cache-dtype fp8",
                 "--limit-mm-per-prompt '{\"image\":1,\"video\":0}'", "--enable-prefix-caching"):
        assert line in unit, f"{line!r} not in the unit:\n{unit}"
    assert "--quantization" not in unit and "--api-key" not in unit
    # the key is a read-only mount read by an sh entrypoint, never the container's env
    assert f"-v {KEY_FILE}:/run/secrets/VLLM_API_KEY:ro" in unit and "--entrypoint /bin/sh" in unit
    # what systemd made of the quoting is what the container got
    args = json.loads(sh(laptop.host, "docker inspect -f '{{json .Args}}' vllm"))
    assert args[args.index("--limit-mm-per-prompt") + 1] == '{"image":1,"video":0}'
    assert sh(laptop.host, "stat -c %a /etc/provision/vllm/vllm.env") == "600"


def test_rerun_changes_nothing_and_does_not_restart(served, laptop):
    second, name = served["second"], laptop.host.name
    assert second.returncode == 0, second.output
    assert second.host(name)["changed"] == 0, second.changed_tasks(name)
    assert served["start_2"] == served["start_1"], "the container was restarted"
    # the GPU stack's and the serving play's state in batches; the smoke checks run in the probe, so
    # the smoke task applies nothing and the memory report's probe rides an earlier batch (9 when the
    # smoke applied: its readiness poll, its checks, then the memory probe again)
    assert second.host(name)["round_trips"] <= 6
    smoke = next(t for t in second.host(name)["tasks"] if t["name"].startswith("vLLM answers"))
    assert smoke["status"] == "ok" and "'Red." in smoke["summary"]


def test_a_converged_site_costs_the_connection_and_one_round_trip(served, laptop):
    """Once a converged run has been remembered (runner/probe_memory.py), every probe of both plays
    goes in the first script: the connection plus one round trip, the smoke checks passing in it."""
    third, name = served["third"], laptop.host.name
    assert third.returncode == 0 and third.host(name)["changed"] == 0, third.output
    assert third.host(name)["round_trips"] == 2
    smoke = next(t for t in third.host(name)["tasks"] if t["name"].startswith("vLLM answers"))
    assert smoke["status"] == "ok" and "'Red." in smoke["summary"]


def test_the_api_key_is_generated_once_shown_once_and_works(served, laptop):
    key = served["key"]
    assert len(key) >= 40
    # not a terminal (as in CI): the key is not shown, the run says where to read it
    assert key not in served["first"].output and f"sudo cat {KEY_FILE}" in served["first"].output
    assert key not in served["second"].output
    assert sh(laptop.host, f"stat -c %a {KEY_FILE}") == "600"
    unauthorized = sh(laptop.host, "curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:8000/v1/models")
    assert unauthorized == "401"
    header = f"Authorization: Bearer {key}"
    models = sh(laptop.host, f"curl -s -H '{header}' http://127.0.0.1:8000/v1/models")
    assert [m["id"] for m in json.loads(models)["data"]] == [SERVED]


@pytest.fixture(scope="module")
def flag_changed(served, laptop: Laptop) -> dict[str, Any]:
    """max_num_seqs 4 -> 3 in the inventory: one restart; then a rerun."""
    laptop.set_vars(max_num_seqs=3)
    run = laptop.up("flag", "--tags", SERVING)
    start = started_at(laptop.host)
    rerun = laptop.up("flag-rerun", "--tags", SERVING)
    return {"run": run, "rerun": rerun, "start": start, "start_after_rerun": started_at(laptop.host)}


def test_a_changed_flag_restarts_once_with_the_new_flag(flag_changed, served, laptop):
    run, name = flag_changed["run"], laptop.host.name
    assert run.returncode == 0, run.output
    assert run.changed_tasks(name) == [RELEASE_TASK]
    assert flag_changed["start"] != served["start_2"]
    unit = sh(laptop.host, f"cat {UNIT}")
    assert "--max-num-seqs 3" in unit and "--max-num-seqs 4" not in unit
    release = next(t for t in run.host(name)["tasks"] if t["name"] == RELEASE_TASK)
    assert "arguments --max-num-seqs 4 -> 3" in release["summary"] and "'Red." in release["summary"]
    rerun = flag_changed["rerun"]
    assert rerun.returncode == 0 and rerun.host(name)["changed"] == 0, rerun.output
    assert flag_changed["start_after_rerun"] == flag_changed["start"]


@pytest.fixture(scope="module")
def failed_upgrades(flag_changed, laptop: Laptop, vllm_images) -> dict[str, Any]:
    """Upgrades, one after the other on the same host, to an image that fails each way vLLM fails
    (the stand-in's failure modes print real vLLM's lines), then to one that answers the vision
    check wrong; each must be rolled back."""
    good_image = sh(laptop.host, "docker inspect -f '{{.Config.Image}}' vllm")
    results: dict[str, Any] = {"good_image": good_image}
    for behaviour in (*FAILURES, "wrong-vision"):
        laptop.set_vars(max_num_seqs=3, vllm_image=vllm_images[behaviour])
        run = laptop.up(behaviour, "--tags", SERVING)
        release = next((t for t in run.host(laptop.host.name)["tasks"] if t["name"] == RELEASE_TASK), {})
        results[behaviour] = {"run": run, "image": sh(laptop.host, "docker inspect -f '{{.Config.Image}}' vllm"),
                              "elapsed": release.get("elapsed"),
                              "record": json.loads(sh(laptop.host, "cat /var/lib/provision/vllm/release.json"))}
    laptop.set_vars(max_num_seqs=3)
    results["smoke"] = laptop.run("smoke", str(laptop.inventory), name="smoke-after-rollbacks")
    print("\nfailed upgrades (release task seconds, incl. rollback and its smoke checks): "
          + ", ".join(f"{b} {results[b]['elapsed']}" for b in (*FAILURES, "wrong-vision")))
    return results


# the cause fatal.py names and the start of the real line it quotes, per stand-in failure mode
FAILURE_REASONS = {
    "kv-cache-too-small": ("the context does not fit in the KV cache",
                           "ValueError: To serve at least one request with the models's max seq len (131072)"),
    "cuda-oom": ("out of GPU memory", "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate"),
    "no-kernel-image": ("no kernels for this GPU", "RuntimeError: CUDA error: no kernel image is available"),
    "no-cache-blocks": ("no GPU memory left for the KV cache", "ValueError: No available memory for the cache blocks"),
    "gpu-memory-taken": ("another process holds GPU memory",
                         "ValueError: Free memory on device cuda:0 (20.00/24.0 GiB)"),
    "no-gpu": ("the container sees no GPU", "RuntimeError: Failed to infer device type"),
    "weights-missing": ("the weights are not in the mounted Hugging Face cache",
                        f"Value error, Invalid repository ID or local directory specified: '{REPO}'."),
    "bad-config": ("vLLM rejected a configuration value", "Value error, Expecting value: line 1 column 1 (char 0)"),
    "mmap-failed": ("no known cause; vLLM's last error", "RuntimeError: unable to mmap"),
    "wrong-vision": ("does not contain 'red'", ""),
}


@pytest.mark.parametrize("behaviour", [*FAILURES, "wrong-vision"])
def test_a_failing_upgrade_is_rolled_back_and_the_host_fails_with_the_reason(failed_upgrades, laptop, behaviour):
    outcome, name = failed_upgrades[behaviour], laptop.host.name
    cause, quote = FAILURE_REASONS[behaviour]
    run = outcome["run"]
    assert run.returncode == 1, run.output
    error = run.host(name)["tasks"][-1]["error"]
    assert run.host(name)["failed"] == 1 and name in error and cause in error and quote in error, error
    assert "rolled back to release" in error and "passed the smoke checks" in error
    assert outcome["image"] == failed_upgrades["good_image"], "the previous release serves again"
    assert outcome["record"]["last_failed"]["reason"] and behaviour in outcome["record"]["last_failed"]["image"]
    assert name in run.output and cause in run.output
    if behaviour != "wrong-vision":
        assert outcome["elapsed"] < 60, "reported in seconds, not after the 180 s readiness timeout"


def test_after_the_rollbacks_the_previous_release_answers_the_smoke_checks(failed_upgrades, laptop):
    smoke = failed_upgrades["smoke"]
    assert smoke.returncode == 0, smoke.output
    assert "SMOKE" in smoke.stdout and "'Red. The image is mostly red.'" in smoke.stdout
    assert "not checked" not in smoke.stdout  # the table reads the task's own result (it did not)


@pytest.fixture(scope="module")
def rolled_back(failed_upgrades, laptop: Laptop) -> dict[str, Any]:
    """`provision rollback`: from the max_num_seqs=3 release back to the first one."""
    run = laptop.run("rollback", str(laptop.inventory), name="rollback")
    return {"run": run, "unit": sh(laptop.host, f"cat {UNIT}"),
            "record": json.loads(sh(laptop.host, "cat /var/lib/provision/vllm/release.json"))}


def test_rollback_command_serves_the_previous_release(rolled_back, laptop):
    run = rolled_back["run"]
    assert run.returncode == 0, run.output
    assert run.changed_tasks(laptop.host.name) == ["vLLM rolled back to the previous release"]
    assert "--max-num-seqs 4" in rolled_back["unit"]
    record = rolled_back["record"]
    assert "4" in record["current"]["arguments"][record["current"]["arguments"].index("--max-num-seqs") + 1]
    assert record["previous"]["arguments"][record["previous"]["arguments"].index("--max-num-seqs") + 1] == "3"
    assert "'Red." in run.host(laptop.host.name)["tasks"][0]["summary"]


def test_render_lists_the_vllm_serve_arguments_that_vllms_parser_accepts(laptop):
    run = provision("render", str(laptop.inventory))
    assert run.returncode == 0, run.output
    lines = run.stdout.splitlines()
    assert lines[0] == f"# {laptop.host.name}" and lines[1:4] == ["vllm", "serve", REPO]
    parsed = parse_command_line(lines[2:], "vllm")
    assert parsed.max_model_len == 131072 and parsed.served_model_name == [SERVED]
    assert parsed.limit_mm_per_prompt == {"image": 1, "video": 0} and parsed.api_key is None


@pytest.fixture(scope="module")
def killed_download(rolled_back, laptop: Laptop, tmp_path_factory) -> Iterator[dict[str, Any]]:
    """A second, throttled repository: the run is SIGKILLed mid-download, then run again."""
    import os
    import signal
    import subprocess
    import sys

    from tests.e2e.helpers import REPO as CHECKOUT

    tmp = tmp_path_factory.mktemp("killed")
    size = 6 * MIB
    slow = start_hub(tmp / "repo", repo_id="provision-test/slow-model", shard_size=size, shards=1,
                     options=HubOptions(token=HF_TOKEN, throttle_bytes_per_s=MIB, request_log=tmp / "log.jsonl"))
    try:
        laptop.set_vars(hf_model="provision-test/slow-model", hf_endpoint=hub_endpoint(slow))
        argv = [sys.executable, "-m", "provision", "up", str(laptop.inventory), "--tags", "model"]
        process = subprocess.Popen(argv, cwd=CHECKOUT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                   start_new_session=True)
        part = "/var/lib/provision/huggingface/hub/models--provision-test--slow-model/blobs/*.part"
        deadline, ps_during = time.monotonic() + 120, ""
        while time.monotonic() < deadline and process.poll() is None:
            have = laptop.host.exec(f"stat -c %s {part} 2>/dev/null || echo 0")[1].split()
            if have and int(have[0]) >= 2 * MIB:
                ps_during = laptop.host.exec("ps -eo args")[1]
                break
            time.sleep(0.2)
        assert process.poll() is None, "the run ended before the download was under way"
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=30)
        # the shard's bytes on the host, in its .part or, once complete, its blob
        largest = f"find {part.rsplit('/', 1)[0]} -type f -printf '%s\\n' | sort -n | tail -1"
        left = int(laptop.host.exec(largest)[1].split()[0])
        time.sleep(2)
        still = int(laptop.host.exec(largest)[1].split()[0])
        rerun = laptop.up("resume", "--tags", "model")
        yield {"host": laptop.host.name, "rerun": rerun, "left": left, "still": still, "size": size, "ps": ps_during,
               "requests": [r for r in read_request_log(tmp / "log.jsonl") if "/resolve/" in r["path"]
                            and r["path"].endswith(".safetensors")]}
    finally:
        slow.stop()
        laptop.set_vars(max_num_seqs=3)


def test_a_killed_download_goes_on_in_its_host_unit_and_the_rerun_completes(killed_download):
    rerun = killed_download["rerun"]
    assert rerun.returncode == 0, rerun.output
    left, size = killed_download["left"], killed_download["size"]
    assert 0 < left < size
    # the download runs in a unit on the host (runner/early.py): it outlives the killed controller
    assert killed_download["still"] > left, "the host unit stopped downloading when the tool was killed"
    first, *resumed = killed_download["requests"]
    assert first["range"] is None
    # a rerun that found it still running stopped it and resumed from the .part, never from zero
    assert all(r["range"] and int(r["range"][6:-1]) >= left and r["status"] == 206 for r in resumed)
    weights = next(t for t in rerun.host(killed_download["host"])["tasks"]
                   if t["name"] == "model weights downloaded and verified")
    assert weights["status"] in ("ok", "changed") and "provision-test/slow-model" in weights["summary"]
    assert HF_TOKEN not in killed_download["ps"]


def encoded_forms(secret: str) -> list[str]:
    """The secret as is, and the base64 text its bytes alone decide at each of the 3 alignments it can
    have inside a longer encoded text (the first and last 4-character group of each dropped: they
    mix in the neighbouring bytes), standard and URL-safe."""
    forms = [secret]
    for offset in range(3):
        encoded = base64.b64encode(b"\0" * offset + secret.encode()).decode()[4:-4]
        forms += [encoded, encoded.replace("+", "-").replace("/", "_")]
    return forms


def found_in(text: str, secrets_: list[str]) -> list[str]:
    """Which secrets the text holds, in any of their encoded forms."""
    return [secret for secret in secrets_ if any(form in text for form in encoded_forms(secret))]


def secret_leaks(laptop: Laptop, key: str, *others: str) -> list[str]:
    """Where the HF token, the API key or `others` (a become password) show up, as is or base64, but
    must not: every run's output and --json document, the controller's cache folder, the host's
    journal, docker logs and inspect, the container's env, the unit, the env file, the record, the
    run lock's holder record, `ps`, and every file of the host outside root-only (0600/0400) ones,
    where only the API key may be. Empty when they stay in."""
    host, leaks = laptop.host, []
    wanted = [HF_TOKEN, key, *others]
    for run in laptop.runs:
        if found := found_in(run.output, wanted):
            leaks.append(f"the output of a run ({run.output[:80]!r}...): {len(found)} secret(s)")
        document = json.dumps(run.results, ensure_ascii=False) + json.dumps(run.results)
        if found_in(document, wanted):
            leaks.append("a --json document")
    for path in sorted(p for p in laptop.cache.rglob("*") if p.is_file()):
        if found_in(path.read_bytes().decode("latin-1"), wanted):
            leaks.append(f"the controller cache: {path.relative_to(laptop.cache)}")
    places = {
        "journal": "journalctl --no-pager -o cat",
        "docker logs": "docker logs vllm 2>&1",
        "unit": f"cat {UNIT}",
        "ps": "ps -eo args",
        "release record": "cat /var/lib/provision/vllm/release.json",
        "run lock's holder record": "cat /var/lib/provision/run.holder.json",
        "docker inspect": "docker inspect vllm",
        "env file": "cat /etc/provision/vllm/vllm.env",
        "container's env": "docker exec vllm env",
    }
    for place, command in places.items():
        text = host.exec(command)[1]
        if not text.strip():
            leaks.append(f"nothing read from the {place} (cannot tell)")
        elif found_in(text, wanted):
            leaks.append(f"the {place}")
    holder_mode = host.exec("stat -c '%U %a' /var/lib/provision/run.holder.json")[1].strip()
    if holder_mode != "root 600":
        leaks.append(f"the run lock's holder record is {holder_mode}, not root 600")
    forms = [form for secret in wanted for form in encoded_forms(secret)]
    assert all(re.fullmatch(r"[\w+/=-]+", form) for form in forms), "the lab's secrets are shell words"
    patterns = " ".join(f"-e {form}" for form in forms)
    readable = host.exec(f"cd / && su nobody -s /bin/bash -c 'grep -rIlF {patterns} /etc /var /run /tmp "
                         "/root /home 2>/dev/null' || true")[1].strip()
    if readable:
        leaks.append(f"files a non-root user can read: {readable}")
    # every file holding one, as root (docker's image layers aside: inspect and env are read above)
    holding = host.exec(f"grep -rIlF --exclude-dir=docker --exclude-dir=containerd {patterns} /etc /var /run /tmp "
                        "/root /home 2>/dev/null | xargs -r stat -c '%U %a %n' || true")[1]
    key_forms = encoded_forms(key)
    for line in holding.splitlines():
        owner, mode, path = line.split(" ", 2)
        text = host.exec(f"cat -- {quote(path)}")[1]
        if found_in(text, [HF_TOKEN, *others]):
            leaks.append(f"the Hugging Face token or the become password written on the host: {path}")
        elif not (owner == "root" and mode in ("600", "400") and any(form in text for form in key_forms)):
            leaks.append(f"a file that is not root-only holds the API key: {line}")
    return leaks


BECOME_PASSWORD = "pw-" + secrets.token_hex(10)


def test_secrets_appear_nowhere(killed_download, laptop, served):
    """After every run of this module plus a -vv rerun (the hub and the model of the module again, a
    become password in the inventory, the token again with -e, which the run lock's holder record
    must not keep), `render --json` and `vars --json`: no secret anywhere but the API key's
    root-only files. (The login is root: the become password is known to the run, never sent.)"""
    host, key = laptop.host, served["key"]
    laptop.set_vars(ansible_become_password=BECOME_PASSWORD)
    verbose = laptop.up("verbose", "-vv", "-e", f"hf_token={HF_TOKEN}")
    assert verbose.returncode == 0, verbose.output[-3000:]
    assert f"{host.name} | out: " in verbose.output, "the -vv trace shows the hosts' output"
    for command in ("render", "vars"):
        shown = provision(command, str(laptop.inventory), "--json", env=laptop.env)
        assert shown.returncode == 0, shown.output
        laptop.runs.append(shown)
    assert laptop.runs, "no runs recorded"
    assert secret_leaks(laptop, key, BECOME_PASSWORD) == []
    assert sh(host, f"cat {KEY_FILE}") == key and sh(host, f"stat -c '%U %a' {KEY_FILE}") == "root 600"

import shutil
import subprocess

import pytest

from provision.cli.fleet import memory_lines
from provision.vllm.endpoint import Endpoint
from provision.vllm.release import Layout
from provision.vllm.status import (
    ServiceStatus,
    describe_failure,
    drift,
    drift_summary,
    memory_found,
    parse_metrics,
    parse_status,
    status_script,
)

OUTPUT = """@@status unit
ActiveState=active
SubState=running
ActiveEnterTimestampMonotonic=1000000000
UnitFileState=enabled
NowUptime=1600.00
@@status record
{"version": 1, "current": {"id": "abc", "image": "vllm/vllm-openai:v0.21.0-cu129", "flags_fingerprint": "f1"}}
@@status health
200
@@status metrics-1
vllm:generation_tokens_total{model_name="m"} 1000.0
vllm:num_requests_running{model_name="m"} 2.0
@@status metrics-2
vllm:generation_tokens_total{model_name="m"} 1270.0
vllm:num_requests_running{model_name="m"} 2.0
vllm:num_requests_waiting{model_name="m"} 0.0
vllm:kv_cache_usage_perc{model_name="m"} 0.25
@@status end
"""


LAYOUT = Layout("vllm", "/etc/provision/vllm/vllm.env", "/var/lib/provision/vllm", "/etc/provision/vllm/api-key")


def test_parse_status():
    status = parse_status(OUTPUT)
    assert status.state == "active (running)" and status.uptime_s == 600.0
    assert status.health == "ok" and status.release["id"] == "abc"
    assert status.tokens_per_s == 270.0 and status.running == 2.0 and status.waiting == 0.0
    assert status.kv_cache_percent == 25.0 and status.problems == []


def test_down_service():
    status = parse_status("@@status unit\nActiveState=failed\nSubState=failed\n@@status health\n000\n@@status end\n")
    assert status.health == "down" and status.uptime_s is None and status.tokens_per_s is None


RELEASE = {"id": "r1", "image": "vllm/vllm-openai:v0.21.0", "pinned_image": "vllm/vllm-openai@sha256:" + "ab" * 32,
           "unit_sha256": "u1", "weights": {"commit": "c" * 40}}
WANTED = ["org/model", "--max-num-seqs", "3", "--max-model-len", "auto"]
RUNNING = ["-c", "script", "provision-secrets", "vllm", "serve", "org/model", "--max-num-seqs", "3",
           "--max-model-len", "131072"]


def running(cmd: list[str] = RUNNING, unit: str = "u1", image: str = RELEASE["pinned_image"]) -> ServiceStatus:
    return ServiceStatus(release=RELEASE, live={"arguments": cmd, "unit_sha256": unit, "image": image})


def test_in_sync_is_judged_from_the_running_container():
    assert drift(running(), WANTED, "vllm/vllm-openai:v0.21.0") == []
    assert drift_summary([]) == "in sync" and drift(ServiceStatus(), WANTED, "") == ["not deployed"]


def test_drift_lists_what_differs_in_the_running_container_and_the_live_unit():
    """Before: drift came from the release record, so a hand-edited unit showed "in sync", and
    "DRIFT" did not say what drifted."""
    edited = [*RUNNING[:7], "9", *RUNNING[8:], "--enforce-eager"]
    found = drift(running(edited, unit="u2"), WANTED, "vllm/vllm-openai:v0.22.0")
    assert "--max-num-seqs 9 ≠ 3" in found
    assert "--enforce-eager not in the inventory" in found
    assert "image vllm/vllm-openai@sha256:abababababab… ≠ inventory's vllm/vllm-openai:v0.22.0" in found
    assert "unit file edited on the host (not what release r1 deployed)" in found
    assert drift(running([]), WANTED, "") == ["no container running"]


def test_the_last_failed_upgrade_is_shown_with_its_reason():
    status = parse_status(OUTPUT.replace('"flags_fingerprint": "f1"}', '"flags_fingerprint": "f1"}, "last_failed": '
                                         '{"id": "bad1", "image": "img:2", "weights": {"commit": "dddd"}, '
                                         '"reason": "vLLM exited: CUDA out of memory\\nmore"}'))
    assert describe_failure(status.last_failed) == (
        "release bad1 (image img:2, weights dddd) failed: vLLM exited: CUDA out of memory")


def test_metrics_sum_label_sets():
    assert parse_metrics('a{x="1"} 1\na{x="2"} 2.5\n# HELP a\n') == {"a": 3.5}


def test_script_is_valid_bash():
    script = status_script(LAYOUT,
                           Endpoint("vllm", 8000, "/etc/provision/vllm/vllm.env", "m"))
    subprocess.run(["bash", "-n"], input=script, text=True, check=True)


def test_uptime_past_36_minutes_read_with_mawk(tmp_path):
    """Before: the host's clock went through awk's printf "%d", which mawk (Debian's and Ubuntu's
    default awk) caps at 2147483647: every service up more than ~36 minutes showed `0m 0s`. The
    script's clock line runs here under bash with the real mawk as `awk`."""
    mawk = shutil.which("mawk")
    if mawk is None:
        pytest.skip("mawk is not installed (apt-get install mawk)")
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin/awk").symlink_to(mawk)
    (tmp_path / "uptime").write_text("90061.37 170000.10\n")  # 1 day, 1 h, 1 min up
    script = status_script(LAYOUT,
                           Endpoint("vllm", 8000, "/etc/provision/vllm/vllm.env", "m"))
    clock = "\n".join(line.replace("/proc/uptime", str(tmp_path / "uptime"))
                      for line in script.splitlines() if "/proc/uptime" in line)
    done = subprocess.run(["bash", "-c", clock], capture_output=True, text=True, check=True,
                          env={"PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin"})
    started_s = 3600  # the unit became active an hour after boot
    status = parse_status(f"@@status unit\nActiveState=active\nSubState=running\n"
                          f"ActiveEnterTimestampMonotonic={started_s * 1_000_000}\n{done.stdout}@@status end\n")
    assert status.uptime_s == pytest.approx(90061.37 - started_s)


def test_auto_in_the_inventory_matches_the_number_it_was_deployed_with():
    from provision.vllm.status import resolve_auto

    deployed = ["org/model", "--max-model-len", "228544", "--max-num-seqs", "4"]
    assert resolve_auto(["org/model", "--max-model-len", "auto", "--max-num-seqs", "4"], deployed) == deployed
    changed = resolve_auto(["org/model", "--max-model-len", "auto", "--max-num-seqs", "3"], deployed)
    assert changed != deployed and changed[2] == "228544"


def test_planned_vs_found_memory_from_the_record_warns_when_vllm_found_much_less():
    release = {"planned_memory": {"kv_available_gib": 3.06, "full_sequences": 1.44},
               "startup_memory": {"kv_available_gib": 2.2, "max_concurrency": 1.03, "kv_cache_tokens": 135000}}
    found = memory_found(release)
    assert (found["kv_planned_gib"], found["kv_found_gib"]) == (3.06, 2.2)
    assert (found["sequences_planned"], found["sequences_found"]) == (1.44, 1.03)
    assert found["memory_warnings"] == [
        "vLLM found 2.20 GiB of KV cache memory, 28% below the planned 3.06 GiB: the memory plan was off",
        "vLLM found 1.03 of full-length sequences, 28% below the planned 1.44: the memory plan was off"]
    close = memory_found({**release, "startup_memory": {"kv_available_gib": 2.9, "max_concurrency": 1.36}})
    assert close["memory_warnings"] == []
    assert memory_found(None) == {"kv_planned_gib": None, "kv_found_gib": None, "sequences_planned": None,
                                  "sequences_found": None, "memory_warnings": []}


def test_status_prints_planned_vs_found_per_host_and_the_warning():
    rows = {"desk-1": {**memory_found({"planned_memory": {"kv_available_gib": 3.06, "full_sequences": 1.44},
                                       "startup_memory": {"kv_available_gib": 2.2, "max_concurrency": 1.03}})},
            "desk-2": memory_found(None)}
    text = [line.plain for line in memory_lines(rows)]
    assert text[0] == ("desk-1: KV cache planned 3.06 GiB, found 2.20 GiB; full-length sequences planned 1.44, "
                       "found 1.03")
    assert text[1].startswith("WARNING desk-1: vLLM found 2.20 GiB of KV cache memory, 28% below the planned 3.06")
    assert len(text) == 3, "a host with no figures gets no line"


def test_status_warns_of_a_kernel_that_would_boot_without_the_driver():
    """The same fact as preflight's warning (HostFacts.kernels_without_nvidia_module), from the probe."""
    from pathlib import Path

    from provision.cli.fleet import kernel_lines
    from provision.facts import parse_probe

    recorded = (Path(__file__).parent / "fixtures/facts/h200-driver580.txt").read_text()
    probe = recorded + "@@section kernel-modules\n6.8.0-88-generic yes\n6.8.0-90-generic no\n"
    facts = parse_probe(probe)
    assert facts.kernels_without_nvidia_module == ("6.8.0-90-generic",)
    every_kernel = parse_probe(recorded + "@@section kernel-modules\n6.8.0-88-generic yes\n")
    assert every_kernel.kernels_without_nvidia_module == ()
    rows = {"h200": {"kernels_without_nvidia_module": list(facts.kernels_without_nvidia_module)},
            "desk-1": {"kernels_without_nvidia_module": []}}
    assert [line.plain for line in kernel_lines(rows)] == [
        "WARNING h200: no NVIDIA module for kernel(s) 6.8.0-90-generic: booting it leaves the host without a "
        "GPU driver"]

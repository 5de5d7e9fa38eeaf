"""The office's metrics (roles/office_metrics) planned from an inventory: Prometheus scrapes every GPU
host's vLLM, every host's node-exporter and the gateway's HAProxy, its config checked by the real
promtool; history bounded by the retention settings and the disk check; the GPU readings program
parses a real H200's nvidia-smi output; the gateway proxies the read-only query API; a single laptop's
inventory installs nothing."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from provision.cli.main import main
from provision.inventory.loader import load_inventory
from provision.office_gateway.backends import BackendError
from provision.office_metrics.targets import scrape_jobs
from provision.playbook.loader import load_playbook
from provision.playbook.templating import Renderer, make_environment
from provision.settings.variables import inventory_variables
from tests.unit.test_roles_gpu_support import SITE, facts, render
from tests.unit.test_roles_office_gateway import OFFICE, haproxy_config

REPO = Path(__file__).resolve().parents[2]
FRESH_DEBIAN = "debian12-rtx5090-standin-fresh.txt"
# nvidia-smi on a real H200 (driver 580.159.04), captured on the project's lent machine: see its README.md
H200 = Path(__file__).parent / "fixtures" / "nvidia_smi_h200_metrics"
GPU_PROGRAM = REPO / "roles" / "office_metrics" / "templates" / "gpu-metrics.sh"
REGISTERED = {name: {"changed": False} for name in ("office_metrics_gpu_service", "office_metrics_gpu_timer")}


def metrics_play():
    return next(play for play in load_playbook(SITE) if play.name == "office metrics")


def metrics_tasks(tmp_path: Path, host: str, text: str = OFFICE, **overrides: object) -> dict[str, object]:
    path = tmp_path / "office.yaml"
    path.write_text(text)
    play = metrics_play()
    variables = {**play.defaults, **inventory_variables(load_inventory(path)), "facts": facts(FRESH_DEBIAN).as_vars(),
                 "inventory_hostname": host, "notified_handlers": [], **REGISTERED, **overrides}
    render_with = Renderer(make_environment(play.template_dirs), variables)
    return {task.name: render(task, render_with) for task in play.tasks}


def active(tasks: dict[str, object]) -> list[str]:
    return [name for name, rendered in tasks.items() if not rendered.skipped]


def test_prometheus_scrapes_every_gpu_hosts_vllm_every_hosts_node_exporter_and_haproxy(tmp_path: Path) -> None:
    config = yaml.safe_load(metrics_tasks(tmp_path, "gw")["prometheus scrapes the office"].args.content)
    jobs = {job["job_name"]: [(c["labels"]["instance"], c["targets"]) for c in job["static_configs"]]
            for job in config["scrape_configs"]}
    # the gateway's backends, at the port the gateway reaches them by; not the cache, not the gateway
    assert jobs["vllm"] == [("desk-1", ["192.168.1.61:8000"]), ("desk-2", ["192.168.1.62:8001"])]
    assert jobs["node"] == [(name, [f"{address}:9100"]) for name, address in
                            (("desk-1", "192.168.1.61"), ("desk-2", "192.168.1.62"), ("nas", "192.168.1.10"),
                             ("gw", "192.168.1.5"))]
    assert jobs["haproxy"] == [("gw", ["127.0.0.1:8405"])]
    assert jobs["prometheus"] == [("gw", ["127.0.0.1:9090"])]
    assert config["global"]["scrape_interval"] == "15s"


def test_without_a_gateway_the_office_cache_runs_prometheus_and_no_haproxy_job(tmp_path: Path) -> None:
    text = OFFICE.replace("    office_gateway:\n      hosts:\n        gw: {ansible_host: 192.168.1.5}\n", "")
    assert "prometheus installed" in active(metrics_tasks(tmp_path, "nas", text))
    config = yaml.safe_load(metrics_tasks(tmp_path, "nas", text)["prometheus scrapes the office"].args.content)
    assert [job["job_name"] for job in config["scrape_configs"]] == ["prometheus", "node", "vllm"]


def test_each_host_gets_what_it_is_in_the_office(tmp_path: Path) -> None:
    gateway, desk, cache = (active(metrics_tasks(tmp_path, host)) for host in ("gw", "desk-1", "nas"))
    assert gateway[0] == "enough free disk for the office metrics' history"  # before anything is installed
    assert "prometheus installed" in gateway and "GPU readings taken every few seconds" not in gateway
    assert "GPU readings taken every few seconds" in desk and "prometheus installed" not in desk
    for host in (gateway, desk, cache):
        assert "node-exporter installed" in host and "node-exporter enabled and running" in host
    assert "prometheus installed" not in cache  # the gateway runs it


def test_a_single_laptop_inventory_gets_nothing_of_it(tmp_path: Path) -> None:
    tasks = metrics_tasks(tmp_path, "laptop", (REPO / "inventory" / "host.yaml").read_text())
    assert tasks and active(tasks) == []


def test_retention_and_listen_address_are_prometheus_flags_and_the_config_is_checked(tmp_path: Path) -> None:
    tasks = metrics_tasks(tmp_path, "gw", office_metrics_retention_days=7, office_metrics_retention_size_mib=512)
    flags = tasks["prometheus's flags (retention, listen address)"]
    assert flags.args.dest == "/etc/default/prometheus"  # Debian's unit: ExecStart=/usr/bin/prometheus $ARGS
    args = subprocess.run(["bash", "-c", f'{flags.args.content}\nprintf "%s\\n" $ARGS'], capture_output=True,
                          text=True, check=True).stdout.split()
    for flag in ("--storage.tsdb.retention.time=7d", "--storage.tsdb.retention.size=512MB",
                 "--web.listen-address=127.0.0.1:9090", "--config.file=/etc/prometheus/prometheus.yml",
                 "--storage.tsdb.path=/var/lib/prometheus/metrics2"):
        assert flag in args, flag
    assert flags.task.notify == ["restart prometheus"]
    write = tasks["prometheus scrapes the office"]
    assert write.args.validate_with == ["/usr/bin/promtool", "check", "config"]
    assert write.task.notify == ["reload prometheus"]


@pytest.mark.skipif(shutil.which("promtool") is None, reason="needs promtool (apt-get install prometheus)")
def test_promtool_itself_accepts_the_rendered_config(tmp_path: Path) -> None:
    config = tmp_path / "prometheus.yml"
    config.write_text(metrics_tasks(tmp_path, "gw")["prometheus scrapes the office"].args.content)
    done = subprocess.run(["promtool", "check", "config", str(config)], capture_output=True, text=True, check=False)
    assert done.returncode == 0 and "SUCCESS" in done.stdout, done.stdout + done.stderr


@pytest.mark.parametrize(("size_mib", "passes"), [(64, True), (1 << 30, False)])
def test_the_disk_check_asks_for_the_retention_size(tmp_path: Path, size_mib: int, passes: bool) -> None:
    storage = tmp_path / "not-yet" / "metrics2"
    check = metrics_tasks(tmp_path, "gw", office_metrics_retention_size_mib=size_mib,
                          office_metrics_storage_path=str(storage))["enough free disk for the office metrics' history"]
    assert check.args.defer is False  # fails at once, before Prometheus is installed
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", check.args.cmd], capture_output=True, text=True,
                          check=False)
    assert (done.returncode == 0) is passes, done.stdout + done.stderr
    assert re.fullmatch(rf"\d+ MiB free or held by the history on the filesystem of {tmp_path}, "
                        rf"{size_mib + 512} MiB needed\n", done.stdout), done.stdout


def test_a_hostile_node_address_is_refused_when_the_config_is_built(tmp_path: Path) -> None:
    hostvars = {"desk-1": {"address": "192.168.1.61", "office_metrics_node_address": "x\n- job_name: evil"}}
    with pytest.raises(BackendError, match="host desk-1: office_metrics_node_address must be a host name"):
        scrape_jobs({"all": ["desk-1"], "office_gateway": []}, hostvars, metrics_host="desk-1",
                    cache_group="office_cache", gateway_group="office_gateway", vllm_port=8000, max_num_seqs=4,
                    node_port=9100, haproxy_port=8405, prometheus_port=9090)


def test_the_gateway_proxies_the_read_only_query_api_without_a_key(tmp_path: Path) -> None:
    config = haproxy_config(tmp_path)
    front = config.split("frontend office")[1].split("\nbackend ")[0]
    assert "acl status_read path /status/api/v1/query /status/api/v1/query_range /status/api/v1/targets" in front
    assert "http-request deny deny_status 403 if status_api !status_read" in front
    assert "http-request deny deny_status 405 hdr Allow GET if status_read !METH_GET" in front
    # the routing to Prometheus comes before the default backend, and nothing asks for a key
    assert front.index("use_backend prometheus if status_read") < front.index("default_backend vllm")
    assert "Authorization" not in front
    prometheus = config.split("\nbackend prometheus\n")[1]
    assert "server prometheus 127.0.0.1:9090" in prometheus
    assert "http-request use-service prometheus-exporter if { path /metrics }" in config
    assert "bind 127.0.0.1:8405" in config


# --- the GPU readings program, run against a real H200's nvidia-smi output ------------------------------


def run_gpu_program(tmp_path: Path, output: str, status: int = 0) -> tuple[subprocess.CompletedProcess[str], Path]:
    """gpu-metrics.sh with a stand-in `nvidia-smi` on PATH that prints a recorded output (the real
    GPU and driver cannot exist on this machine) and exits with the recorded status."""
    bin_dir, textfiles = tmp_path / "bin", tmp_path / "textfiles"
    bin_dir.mkdir(exist_ok=True)
    textfiles.mkdir(exist_ok=True)
    (tmp_path / "recorded").write_text(output)
    standin = bin_dir / "nvidia-smi"
    standin.write_text(f"#!/bin/sh\ncat {tmp_path / 'recorded'}\nexit {status}\n")
    standin.chmod(0o755)
    done = subprocess.run(["bash", str(GPU_PROGRAM), str(textfiles)], capture_output=True, text=True, check=False,
                          env={**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"})
    return done, textfiles


def samples(text: str) -> dict[str, float]:
    return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
            if line and not line.startswith("#")}


def test_gpu_readings_of_a_real_h200(tmp_path: Path) -> None:
    done, textfiles = run_gpu_program(tmp_path, (H200 / "query-gpu-metrics-noheader-nounits.csv").read_text())
    assert done.returncode == 0, done.stderr
    assert [p.name for p in textfiles.iterdir()] == ["gpu.prom"]  # no temporary file left behind
    labels = '{gpu="0",uuid="GPU-ee128efb-58a1-c29c-be4d-77393cdae1e4"}'
    assert samples((textfiles / "gpu.prom").read_text()) == {
        'nvidia_gpu_info{gpu="0",uuid="GPU-ee128efb-58a1-c29c-be4d-77393cdae1e4",name="NVIDIA H200"}': 1,
        f"nvidia_gpu_temperature_celsius{labels}": 43, f"nvidia_gpu_power_draw_watts{labels}": 80.74,
        f"nvidia_gpu_power_limit_watts{labels}": 700, f"nvidia_gpu_memory_used_bytes{labels}": 0,
        f"nvidia_gpu_memory_total_bytes{labels}": 143771 * 1024 * 1024, f"nvidia_gpu_utilization_ratio{labels}": 0,
        "nvidia_smi_up": 1}
    # the real capture with units agrees (memory in MiB, power in W)
    assert "143771 MiB" in (H200 / "query-gpu-metrics.csv").read_text()


def test_a_reading_the_gpu_has_not_is_left_out_not_zero(tmp_path: Path) -> None:
    # "[N/A]" as the real H200 prints it for its fan with nounits (query-extra-noheader-nounits.csv)
    assert "[N/A]" in (H200 / "query-extra-noheader-nounits.csv").read_text()
    line = (H200 / "query-gpu-metrics-noheader-nounits.csv").read_text().replace("80.74", "[N/A]")
    done, textfiles = run_gpu_program(tmp_path, line)
    text = (textfiles / "gpu.prom").read_text()
    assert done.returncode == 0 and "nvidia_gpu_power_draw_watts{" not in text
    assert 'nvidia_gpu_temperature_celsius{gpu="0"' in text


def test_a_failed_query_says_so_and_replaces_the_old_readings(tmp_path: Path) -> None:
    run_gpu_program(tmp_path, (H200 / "query-gpu-metrics-noheader-nounits.csv").read_text())
    # the real message and exit status of a query nvidia-smi could not answer
    done, textfiles = run_gpu_program(tmp_path, (H200 / "query-bad-id.txt").read_text(), status=6)
    assert done.returncode == 0, done.stderr
    assert samples((textfiles / "gpu.prom").read_text()) == {"nvidia_smi_up": 0}


@pytest.mark.skipif(shutil.which("promtool") is None, reason="needs promtool (apt-get install prometheus)")
def test_promtool_accepts_the_gpu_readings(tmp_path: Path) -> None:
    _, textfiles = run_gpu_program(tmp_path, (H200 / "query-gpu-metrics-noheader-nounits.csv").read_text())
    done = subprocess.run(["promtool", "check", "metrics"], input=(textfiles / "gpu.prom").read_text(),
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize(("setting", "why"), [("office_metrics_retention_size_mib: 10", "an integer from 64 to"),
                                              ("office_metrics_retention_days: 0", "an integer from 1 to"),
                                              ("office_metrics_listen_address: 10.0.0.1", "one of")])
def test_a_retention_or_address_out_of_bounds_is_refused_before_any_contact(tmp_path: Path, capsys, setting: str,
                                                                            why: str) -> None:
    path = tmp_path / "office.yaml"
    path.write_text(OFFICE.replace("gw: {ansible_host: 192.168.1.5}", f"gw: {{ansible_host: 192.168.1.5, {setting}}}"))
    assert main(["vars", str(path), "--host", "gw"]) == 2
    error = capsys.readouterr().err
    assert f"{path}:11: {setting.split(':')[0]}: " in error and why in error, error

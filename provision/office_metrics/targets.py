"""What the office's Prometheus scrapes, read from the inventory: a pure function (inventory in, scrape
jobs out) and the template function that writes them as Prometheus's configuration.

Jobs: `vllm` (every GPU host's /metrics: the gateway's backends, with the address and port the gateway
reaches each by), `node` (node-exporter on every host of the inventory), `haproxy` (the gateway's own
exporter, local) and `prometheus` (itself). Every target's `instance` label is its inventory name, so
a query reads `instance="desk-1"`, whatever address NAT puts in front of it.

vLLM's `--api-key` guards only the OpenAI routes under /v1 (and /v2, /inference): /metrics answers
without a key, so the scrape sends none (vLLM's security guide, "Protected Endpoints" and "Unprotected
Endpoints": https://docs.vllm.ai/en/stable/usage/security/; vllm-project/vllm#29922 wrote it down, and
vllm-project/vllm#58028, still open, proposes guarding /metrics too: then this job needs the key).

The configuration is built here and dumped as YAML, never rendered from strings: a host's name or
address is data in it, whatever it holds, and every address is checked as the settings check does.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import jinja2
import yaml

from provision.office_gateway.backends import BackendError, backends
from provision.settings.formats import FORMATS


@dataclass(frozen=True)
class Target:
    """One endpoint Prometheus scrapes: the host it belongs to and the address:port it reaches."""

    host: str
    address: str
    port: int

    @property
    def endpoint(self) -> str:
        return f"[{self.address}]:{self.port}" if ":" in self.address else f"{self.address}:{self.port}"


@dataclass(frozen=True)
class Job:
    """A Prometheus scrape job: a name and its targets."""

    name: str
    targets: tuple[Target, ...]


def _port(host: str, key: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 65535:
        raise BackendError(f"host {host}: {key} must be an integer from 1 to 65535, got {value!r}")
    return value


def _address(host: str, key: str, value: Any) -> str:
    if not isinstance(value, str) or not FORMATS["host"].pattern.fullmatch(value):
        raise BackendError(f"host {host}: {key} must be a host name or IP address, got {value!r}")
    return value


def scrape_jobs(groups: Mapping[str, list[str]], hostvars: Mapping[str, Mapping[str, Any]], *, metrics_host: str,
                cache_group: str, gateway_group: str, vllm_port: int, max_num_seqs: int, node_port: int,
                haproxy_port: int, prometheus_port: int) -> list[Job]:
    """The scrape jobs of an office inventory; none when it has no metrics host (a single laptop)."""
    if not metrics_host:
        return []
    node = []
    for name in groups.get("all", []):
        own = hostvars.get(name, {})
        address = _address(name, "office_metrics_node_address",
                           own.get("office_metrics_node_address", own.get("address", "")))
        node.append(Target(name, address, _port(name, "office_metrics_node_exporter_port",
                                                own.get("office_metrics_node_exporter_port", node_port))))
    vllm = [Target(b.name, b.address, b.port)
            for b in backends(groups, hostvars, cache_group=cache_group, gateway_group=gateway_group,
                              default_port=vllm_port, default_max_requests=max_num_seqs)]
    jobs = [Job("prometheus", (Target(metrics_host, "127.0.0.1", prometheus_port),)),
            Job("node", tuple(node)), Job("vllm", tuple(vllm))]
    if metrics_host in groups.get(gateway_group, []):
        jobs.append(Job("haproxy", (Target(metrics_host, "127.0.0.1", haproxy_port),)))
    return jobs


def prometheus_config(jobs: list[Job], *, interval_s: int) -> str:
    """Prometheus's configuration (prometheus.yml) for these jobs: one static target per host, its
    `instance` label the host's inventory name."""
    document = {
        "global": {"scrape_interval": f"{interval_s}s", "evaluation_interval": f"{interval_s}s",
                   "scrape_timeout": f"{min(interval_s, 10)}s"},
        "scrape_configs": [
            {"job_name": job.name,
             "static_configs": [{"targets": [target.endpoint], "labels": {"instance": target.host}}
                                for target in job.targets]}
            for job in jobs],
    }
    header = "# Managed by provision (roles/office_metrics): the office's scrape targets, from the inventory.\n"
    return header + yaml.safe_dump(document, sort_keys=False, default_flow_style=False)


@jinja2.pass_context
def office_metrics_prometheus_config(context: jinja2.runtime.Context) -> str:
    """Template function: `prometheus_config` over the variables the template sees."""
    jobs = scrape_jobs(context.get("groups") or {}, context.get("hostvars") or {},
                       metrics_host=str(context["office_metrics_host"]),
                       cache_group=str(context["office_cache_group"]),
                       gateway_group=str(context["office_gateway_group"]),
                       vllm_port=int(context["vllm_port"]), max_num_seqs=int(context["max_num_seqs"]),
                       node_port=int(context["office_metrics_node_exporter_port"]),
                       haproxy_port=int(context["office_metrics_haproxy_port"]),
                       prometheus_port=int(context["office_metrics_port"]))
    return prometheus_config(jobs, interval_s=int(context["office_metrics_scrape_interval_s"]))

"""The controller killed during an upgrade's swap: the host's upgrade guard (provision/vllm/guard.sh)
still ends with a serving endpoint — the new release when it becomes healthy, the previous one
otherwise — and the next run reports what happened. Before: the new unit stayed in place with vLLM
stopped, and the office had no endpoint until someone ran `up` again."""

# the serving laptop's fixtures are imported by name (pytest finds them so), and tests take them as
# arguments: ruff would call each a redefinition
# ruff: noqa: F811
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from typing import Any

from tests.e2e.helpers import REPO, Run
from tests.e2e.test_serving import SERVING, Laptop, hub, laptop, secret_leaks, served, sh, vllm_images  # noqa: F401

GUARD = "provision-guard-vllm"
RECORD = "/var/lib/provision/vllm/release.json"
SLOW_START = ["--gpus", "all", "--ipc=host", "-e", "STANDIN_READY_DELAY=20"]
NEVER_READY = ["--gpus", "all", "--ipc=host", "-e", "STANDIN_READY_DELAY=900"]
SLOW_START_2 = ["--gpus", "all", "--ipc=host", "-e", "STANDIN_READY_DELAY=21"]  # told apart in the unit


def health(laptop: Laptop) -> str:
    return laptop.host.exec("curl -s -o /dev/null -m 3 -w '%{http_code}' http://127.0.0.1:8000/health")[1].strip()


def kill_during_swap(laptop: Laptop, marker: str) -> float:
    """Start `up`, SIGKILL it once the guard is armed and the new unit (containing `marker`) started;
    returns the seconds the endpoint took to answer again (bounded)."""
    argv = [sys.executable, "-m", "provision", "up", str(laptop.inventory), "--tags", SERVING]
    log = laptop.tmp / f"killed-{marker}.out"
    with log.open("w") as sink:
        run = subprocess.Popen(argv, cwd=REPO, stdout=sink, stderr=subprocess.STDOUT,
                               start_new_session=True, env={**os.environ, "COLUMNS": "200"})
    armed = f"systemctl is-active --quiet {GUARD} && grep -q -- {marker} /etc/systemd/system/vllm.service"
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and run.poll() is None and laptop.host.exec(armed)[0] != 0:
            time.sleep(0.2)
        if run.poll() is not None:
            print(log.read_text()[-3000:])
        assert run.poll() is None, "the run ended before its swap: nothing was interrupted"
        time.sleep(2)  # inside the readiness wait of the new release
        os.killpg(run.pid, signal.SIGKILL)
    finally:
        run.wait(timeout=30)
        laptop.runs.append(Run(run.returncode, log.read_text(), "", None))  # searched for secrets too
    killed = time.monotonic()
    # the guard decides (it may find a healthy release failing its smoke checks and restore the old)
    while time.monotonic() - killed < 240 and laptop.host.exec(f"systemctl is-active --quiet {GUARD}")[0] == 0:
        time.sleep(1)
    while time.monotonic() - killed < 300 and health(laptop) != "200":
        time.sleep(1)
    answered = time.monotonic() - killed
    print("guard:", laptop.host.exec(f"journalctl -u {GUARD} --no-pager -o cat | tail -20; "
                                     "ls -la /var/lib/provision/vllm/guard; cat /var/lib/provision/run.holder.json; "
                                     "ps -eo pid,ppid,args | grep -E 'bash -s|guard|sleep 1' | grep -v grep")[1])
    return answered


def record(laptop: Laptop) -> dict[str, Any]:
    return json.loads(sh(laptop.host, f"cat {RECORD}"))


def test_killed_during_a_good_upgrade_the_new_release_is_kept_and_reported(served, laptop, figures):
    assert served["second"].returncode == 0, served["second"].output
    laptop.set_vars(vllm_docker_run_options=SLOW_START)
    answered_after = kill_during_swap(laptop, "STANDIN_READY_DELAY=20")
    figures.kills.append(health(laptop) == "200")
    assert health(laptop) == "200", f"no endpoint {answered_after:.0f} s after the controller was killed"
    kept = record(laptop)
    assert "STANDIN_READY_DELAY=20" in sh(laptop.host, "cat /etc/systemd/system/vllm.service")
    assert "kept it" in (kept.get("note") or ""), kept
    after = laptop.up("after-guard-kept", "--tags", SERVING)
    reported = after.returncode == 0 and "cut off during the upgrade" in after.output and "kept it" in after.output
    figures.faults.append(reported)
    assert reported, after.output
    again = laptop.up("after-guard-kept-again", "--tags", SERVING)
    assert again.returncode == 0 and again.host(laptop.host.name)["changed"] == 0, again.output


def test_killed_during_a_failing_upgrade_the_previous_release_is_restored_and_reported(served, laptop, vllm_images,
                                                                                     figures):
    laptop.set_vars(vllm_docker_run_options=SLOW_START)
    good_image = sh(laptop.host, "docker inspect -f '{{.Config.Image}}' vllm")
    # a release that never becomes ready (its start hangs): the run is killed while it waits for it
    laptop.set_vars(vllm_docker_run_options=NEVER_READY, vllm_ready_timeout=30)
    answered_after = kill_during_swap(laptop, "STANDIN_READY_DELAY=900")
    figures.kills.append(health(laptop) == "200")
    assert health(laptop) == "200", f"no endpoint {answered_after:.0f} s after the controller was killed"
    assert "STANDIN_READY_DELAY=20" in sh(laptop.host, "cat /etc/systemd/system/vllm.service"), "the previous one"
    assert sh(laptop.host, "docker inspect -f '{{.Config.Image}}' vllm") == good_image
    restored = record(laptop)
    assert "restored" in restored["last_failed"]["reason"]
    laptop.set_vars(vllm_docker_run_options=SLOW_START)  # back to what serves: the next run only reports
    after = laptop.up("after-guard-restored", "--tags", SERVING)
    reported = after.returncode == 0 and "upgrade guard restored" in after.output
    figures.faults.append(reported)
    assert reported, after.output


def test_killed_during_an_upgrade_that_is_healthy_but_answers_wrong_the_guard_restores_the_previous(
        served, laptop, vllm_images, figures):
    """/health is not enough: the `wrong-vision` stand-in (tests/standins/vllm/openai_requests.py)
    becomes healthy and answers text, but names the wrong colour, as a model served with a broken
    vision tower or a wrong chat template does. The guard runs the run's own smoke checks and
    restores the previous release. Before: it kept any release whose /health answered."""
    laptop.set_vars(vllm_docker_run_options=SLOW_START)
    good_image = sh(laptop.host, "docker inspect -f '{{.Config.Image}}' vllm")
    laptop.set_vars(vllm_image=vllm_images["wrong-vision"], vllm_docker_run_options=SLOW_START_2)
    answered_after = kill_during_swap(laptop, "STANDIN_READY_DELAY=21")
    figures.kills.append(health(laptop) == "200")
    assert health(laptop) == "200", f"no endpoint {answered_after:.0f} s after the controller was killed"
    assert sh(laptop.host, "docker inspect -f '{{.Config.Image}}' vllm") == good_image, "the previous release"
    reason = record(laptop)["last_failed"]["reason"]
    assert "restored" in reason and "smoke check failed: vision" in reason and "does not contain 'red'" in reason
    laptop.set_vars(vllm_docker_run_options=SLOW_START)  # back to what serves: the next run only reports
    after = laptop.up("after-guard-smoke", "--tags", SERVING)
    reported = after.returncode == 0 and "upgrade guard restored" in after.output and "does not contain" in after.output
    figures.faults.append(reported)
    assert reported, after.output


def test_secrets_stay_in_after_the_faults(served, laptop, figures):
    """Every output and --json document of this laptop's runs, and the host's ps, journal, docker
    inspect, container env and files a non-root user can read: no HF token, no API key."""
    leaks = secret_leaks(laptop, served["key"])
    figures.secrets_found.extend(leaks)
    assert leaks == []

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
from tests.e2e.test_serving import RELEASE_TASK, SERVING, Laptop, hub, laptop, secret_leaks, served, sh, vllm_images  # noqa: F401

GUARD = "provision-guard-vllm"
RECORD = "/var/lib/provision/vllm/release.json"
UNIT_FILE = "/etc/systemd/system/vllm.service"
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


# A stand-in for the host's systemctl (the real one moved aside, every caller still served by it) that
# holds one call of the upgrade's swap, before or after it runs, once the guard is armed: the test then
# kills the controller and the swap's script at exactly that moment, and measures the endpoint.
PAUSING_SYSTEMCTL = """#!/bin/bash
pause=/run/provision-test-pause
if [ -e "$pause" ] && [ -e /var/lib/provision/vllm/guard/armed ] && [ "$*" = "$(cut -d' ' -f2- "$pause")" ]; then
  when=$(cut -d' ' -f1 "$pause"); rm -f "$pause"
  [ "$when" = after ] && /usr/bin/systemctl.real "$@"
  echo "$$ $PPID" > /run/provision-test-paused
  exec sleep 600
fi
exec -a systemctl /usr/bin/systemctl.real "$@"
"""
# (where the swap is cut, what the guard must do): each moment of activate_script (release.py)
SWAP_MOMENTS = [
    ("before stop -- vllm.service", "the previous release left serving"),
    ("after stop -- vllm.service", "the previous release restored at once"),
    ("before daemon-reload", "the swap finished: the new release started"),
    ("before enable --quiet -- vllm.service", "the swap finished: the new release started"),
    ("before start -- vllm.service", "the swap finished: the new release started"),
]


def endpoint_down_after(laptop: Laptop, since: float, limit: float = 240) -> float:
    """Seconds from `since` until /health answers 200 and the guard has ended (0: it never stopped
    answering), polled every 0.5 s."""
    down_until = since
    while time.monotonic() - since < limit:
        answering = health(laptop) == "200"
        if not answering:
            down_until = time.monotonic()
        elif laptop.host.exec(f"systemctl is-active --quiet {GUARD}")[0] != 0:
            return down_until - since
        time.sleep(0.5)
    raise AssertionError(f"no endpoint {limit:.0f} s after the controller was killed")


def kill_at(laptop: Laptop, moment: str) -> tuple[float, dict[str, Any]]:
    """Start `up` (an upgrade), SIGKILL it and the swap's script where the swap reaches `moment`;
    the endpoint's downtime after the kill, and the record the guard left."""
    laptop.host.exec(f"echo {moment!r} > /run/provision-test-pause; rm -f /run/provision-test-paused")
    argv = [sys.executable, "-m", "provision", "up", str(laptop.inventory), "--tags", SERVING]
    log = laptop.tmp / f"killed-at-{moment.split()[1]}.out"
    with log.open("w") as sink:
        run = subprocess.Popen(argv, cwd=REPO, stdout=sink, stderr=subprocess.STDOUT,
                               start_new_session=True, env={**os.environ, "COLUMNS": "200"})
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and run.poll() is None and \
                laptop.host.exec("test -s /run/provision-test-paused")[0] != 0:
            time.sleep(0.2)
        assert run.poll() is None, f"{moment}: the run ended before it:\n{log.read_text()[-3000:]}"
        os.killpg(run.pid, signal.SIGKILL)
        killed = time.monotonic()
        # the swap's script dies where it was: the rest of the swap never runs
        laptop.host.exec("kill -KILL $(cat /run/provision-test-paused)")
    finally:
        run.wait(timeout=30)
        laptop.runs.append(Run(run.returncode, log.read_text(), "", None))  # searched for secrets too
    down = endpoint_down_after(laptop, killed)
    print(f"{moment}: down {down:.1f} s after the kill;", laptop.host.exec(f"journalctl -u {GUARD} -o cat "
                                                                          "--no-pager | tail -3")[1])
    return down, record(laptop)


def test_killed_at_every_moment_of_a_swap_the_endpoint_is_back_within_the_release_start(served, laptop, figures):
    """Before: a swap cut off after the stop left the new unit in place, never started; the guard
    waited the whole ready timeout for its /health (302 s in the lab, 1200 s by default), then put the
    previous release back, recording "did not answer /health within 300s". Now the guard looks where
    the swap was cut: it starts what the swap left stopped, restores at once what it cannot start, and
    leaves alone a previous release not yet stopped. Bound: the endpoint is back after a kill within
    the new release's own start-and-check time (the release task's time in an uninterrupted upgrade)."""
    host = laptop.host
    host.exec("[ -e /usr/bin/systemctl.real ] || cp -p /usr/bin/systemctl /usr/bin/systemctl.real")
    host.exec(f"cat > /usr/bin/systemctl.pausing <<'EOF'\n{PAUSING_SYSTEMCTL}EOF\n"
              "chmod 0755 /usr/bin/systemctl.pausing && mv -f /usr/bin/systemctl.pausing /usr/bin/systemctl")
    try:
        laptop.set_vars(vllm_docker_run_options=[*SLOW_START[:-1], "STANDIN_READY_DELAY=6"])
        reference = laptop.up("swap-reference", "--tags", SERVING)
        assert reference.returncode == 0, reference.output
        release_task = next(t for t in reference.host(host.name)["tasks"] if t["name"] == RELEASE_TASK)
        start_and_check = release_task["elapsed"]
        downtimes: dict[str, float] = {}
        for index, (moment, expected) in enumerate(SWAP_MOMENTS):
            laptop.set_vars(vllm_docker_run_options=[*SLOW_START[:-1], "STANDIN_READY_DELAY=6",
                                                     "-e", f"STANDIN_MOMENT={index}"])
            downtimes[moment], after = kill_at(laptop, moment)
            serving = sh(host, f"cat {UNIT_FILE}")
            if expected.startswith("the swap finished"):
                assert f"STANDIN_MOMENT={index}" in serving, f"{moment}: the new release is not the one serving"
                assert "the guard started it" in (after.get("note") or ""), after
            else:
                assert f"STANDIN_MOMENT={index}" not in serving, f"{moment}: the previous release should serve"
                reason = after["last_failed"]["reason"]
                assert "the new release never started" in reason, reason
                assert ("left serving" if "left" in expected else "restored") in reason, reason
        longest = max(downtimes.values())
        print(f"release start-and-check {start_and_check:.1f} s; endpoint down after a kill: "
              + ", ".join(f"{moment} {down:.1f} s" for moment, down in downtimes.items())
              + f"; longest {longest:.1f} s")
        bounded = longest <= start_and_check
        figures.kills.extend([bounded] * len(downtimes))
        assert bounded, f"down {longest:.1f} s after a kill, more than the release's {start_and_check:.1f} s"
        assert downtimes["before stop -- vllm.service"] == 0, "the previous release was stopped for nothing"
    finally:
        host.exec("[ -e /usr/bin/systemctl.real ] && mv -f /usr/bin/systemctl.real /usr/bin/systemctl; "
                  "rm -f /run/provision-test-pause /run/provision-test-paused")
    laptop.set_vars(vllm_docker_run_options=SLOW_START)
    after = laptop.up("after-swap-kills", "--tags", SERVING)
    assert after.returncode == 0, after.output


def test_a_run_takes_over_from_a_guard_waiting_for_a_release(served, laptop, figures):
    """Before: while the guard of a cut-off upgrade waited for its release, every `up` was refused
    ("another provision run holds this host: ... (upgrade guard)"), up to the ready timeout."""
    laptop.set_vars(vllm_docker_run_options=SLOW_START)
    laptop.up("before-takeover", "--tags", SERVING)
    laptop.set_vars(vllm_docker_run_options=NEVER_READY, vllm_ready_timeout=120)
    argv = [sys.executable, "-m", "provision", "up", str(laptop.inventory), "--tags", SERVING]
    log = laptop.tmp / "killed-before-takeover.out"
    armed = f"systemctl is-active --quiet {GUARD} && grep -q -- STANDIN_READY_DELAY=900 {UNIT_FILE}"
    with log.open("w") as sink:
        run = subprocess.Popen(argv, cwd=REPO, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and run.poll() is None and laptop.host.exec(armed)[0] != 0:
            time.sleep(0.2)
        assert run.poll() is None, log.read_text()[-3000:]
        time.sleep(2)
        os.killpg(run.pid, signal.SIGKILL)
    finally:
        run.wait(timeout=30)
        laptop.runs.append(Run(run.returncode, log.read_text(), "", None))
    holder = "grep -q 'upgrade guard' /var/lib/provision/run.holder.json"
    assert wait_for(lambda: laptop.host.exec(holder)[0] == 0, 30), "the guard never took over the run lock"
    laptop.set_vars(vllm_docker_run_options=SLOW_START, vllm_ready_timeout=180)
    started = time.monotonic()
    rerun = laptop.up("takes-over", "--tags", SERVING)
    took = time.monotonic() - started
    taken = rerun.returncode == 0 and "taking over from it" in rerun.output
    figures.faults.append(taken)
    print(f"the rerun took over from the guard and finished in {took:.0f} s")
    assert taken, rerun.output[-4000:]
    assert health(laptop) == "200" and "STANDIN_READY_DELAY=20" in sh(laptop.host, f"cat {UNIT_FILE}")


def wait_for(condition, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.5)
    return False


def test_secrets_stay_in_after_the_faults(served, laptop, figures):
    """Every output and --json document of this laptop's runs, and the host's ps, journal, docker
    inspect, container env and files a non-root user can read: no HF token, no API key."""
    leaks = secret_leaks(laptop, served["key"])
    figures.secrets_found.extend(leaks)
    assert leaks == []

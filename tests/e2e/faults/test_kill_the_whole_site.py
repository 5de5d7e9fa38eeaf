"""The whole site (playbooks/site.yaml) on a fresh lab laptop (stand-in RTX 5090 with nouveau at boot,
so the driver needs a real reboot), as a kill chain: run k is SIGKILLed (the controller's whole
process group, a power cut of the laptop running `provision`) once k tasks have finished, on the
host that runs 1..k-1 left behind. Before each long task a run is also killed inside it (started
once what the killed runs left running on the host has ended; killed when the sign is seen, with
the task before the long one as its last finished): the driver's apt install (apt-get/dpkg working
on the driver's packages), the reboot wait (the host down), the readiness wait (vLLM started, not
ready), the smoke checks; and while each download that starts early (runner/early.py) runs in its host
unit, the controller somewhere in the roles between: the weights (part of a file fetched, started
after office_cache_client) and the image pull (layers arriving, started after docker). A unit outlives
the killed controller; the next run finds its work done or stops it and resumes from what it left.
The chain ends when a run is not killed (it finished); then one more run must change nothing.

Proven: every kill point was reached (each is a task line, or the inside-task sign, seen in that
run's output or on the host before the kill, and no task of that run had failed); each run after a
kill goes past the point where the previous one died, without a failed task; the last converges with
vLLM serving (the release's smoke checks passed) and a rerun changes nothing. Not proven: that a
kill at a boundary k, followed at once by a full run, converges for every k on its own (the chain
proves it for the state the earlier kills left; one host per boundary would need ~80 fresh laptops,
far past CI's budget); processes the controller started on the host are not killed with it (a real
controller's power cut leaves them too): the dpkg-interrupted case is test_killed_run.py.
"""

# the serving laptop's fixtures are imported by name (pytest finds them so), and tests take them as
# arguments: ruff would call each a redefinition
# ruff: noqa: F811
from __future__ import annotations

import re
import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest

from provision.playbook.loader import load_playbook
from tests.e2e.faults.test_kill_at_every_boundary import TASK_LINE, run_and_kill
from tests.e2e.helpers import REPO, provision
from tests.e2e.test_serving import HF_TOKEN, MIB, Laptop, hub_endpoint, sh, vllm_images  # noqa: F401
from tests.lab import LabHost
from tests.standins.hub.cli import RunningHub, start_hub
from tests.standins.hub.server import HubOptions
from tests.standins.nvidia import HostTraits

MAX_RUNS = 150

@pytest.fixture(scope="module")
def slow_hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningHub]:
    """The stand-in hub at 1 MiB/s: the 4 MiB of weights take seconds, long enough to be cut."""
    running = start_hub(tmp_path_factory.mktemp("slow-hub") / "repo", shard_size=2 * MIB, shards=2,
                        options=HubOptions(token=HF_TOKEN, throttle_bytes_per_s=MIB))
    yield running
    running.stop()


@pytest.fixture(scope="module")
def site_laptop(gpu_host, gpu_inventory, vllm_images, slow_hub, tmp_path_factory) -> Laptop:
    host = gpu_host(HostTraits(nouveau_at_boot=True), prefix="site")
    base = {"hf_endpoint": hub_endpoint(slow_hub), "hf_token": HF_TOKEN, "office_cache_trusted": True,
            "vllm_image": vllm_images["ok"],
            "vllm_ready_timeout": 180, "smoke_timeout": 60, "nvidia_reboot": "auto",
            # ready 6 s after start: the readiness wait lasts long enough to be cut
            "vllm_docker_run_options": ["--gpus", "all", "--ipc=host", "-e", "STANDIN_READY_DELAY=6"]}
    return Laptop(host, tmp_path_factory.mktemp("site"), gpu_inventory, base)


def site_tasks(inventory) -> list[str]:
    """The site's tasks in the order a run prints them, as "role: task" (what a task's output line
    names): the listing's order, but the tasks a download that starts early needs (`needs`) right
    after the last task of its `starts_early` role, or of that role's play when it needs one of the
    play's handlers, where the run does them (runner/early.py)."""
    plays = load_playbook(REPO / "playbooks/site.yaml")
    listed = subprocess.run([sys.executable, "-m", "provision", "up", str(inventory), "--list-tasks"], cwd=REPO,
                            capture_output=True, text=True, check=True).stdout
    tasks = [f"{m.group(1)}: {m.group(2)}" for m in re.finditer(r"^ {6}(\w+) : (.+?) {4}TAGS:", listed, re.M)]
    for play in plays:
        for task in play.tasks:
            moved = [f"{task.role}: {name}" for name in task.needs if f"{task.role}: {name}" in tasks]
            after = {task.starts_early}
            for other in plays:
                if task.starts_early in {r.name for r in other.roles} and \
                        set(task.needs) & {h.name for h in other.handlers}:
                    after = {r.name for r in other.roles}
            anchor = [index for index, name in enumerate(tasks) if name.split(": ", 1)[0] in after]
            if not moved or not anchor:
                continue  # (the draft weights need what the weights need: moved again, to the same place)
            for name in moved:
                tasks.remove(name)
            at = max(index for index, name in enumerate(tasks) if name.split(": ", 1)[0] in after) + 1
            tasks[at:at] = moved
    return tasks


def host_shows(host: LabHost, command: str) -> bool:
    try:
        return host.exec(command)[0] == 0
    except Exception:  # the container is down (rebooting): not what was asked
        return False


SEEN: list[str] = []  # what an inside sign saw on the host (shown when a kill point is wrong)


def host_saw(host: LabHost, command: str) -> bool:
    try:
        rc, output = host.exec(command)
    except Exception:
        return False
    if rc == 0:
        SEEN.append(output.strip())
    return rc == 0


# the reboot a run scheduled (provision/ops/reboot.py::reboot_script: `sleep 2; systemctl reboot`, so
# that its SSH command returns first), seen by its shell's command line ([s]: not this probe's own)
REBOOT_PENDING = "pgrep -f '^sh -c [s]leep 2; systemctl reboot' >/dev/null && echo pending; systemctl is-system-running"


def host_down(host: LabHost) -> bool:
    """The container is stopped, or a killed run's reboot is on its way (scheduled, or systemd stopping):
    sshd still answers then, and a run started in that window finds the host gone mid-connect
    ("Error reading SSH protocol banner": run 28 of the chain in a `tests/run.sh -x` check run here)."""
    try:
        rc, output = host.exec(REBOOT_PENDING)
    except Exception:
        return True
    return rc not in (0, 1) or "pending" in output or "stopping" in output


def one_task_past(host: str, tasks: list[str], last: str, last_static: str) -> Callable[[list[str]], bool]:
    """The kill point one task past where the previous run was killed (`last`): the run finished
    `last` and then one more task, or a task of the site beyond `last_static` (the last site task
    seen; `last` may be a handler, which a run whose handlers already ran no longer prints). Counted
    by name, not by line: a handler's line comes and goes between runs."""
    line = re.compile(TASK_LINE.format(host=re.escape(host)))
    beyond = set(tasks[tasks.index(last_static) + 1:]) if last_static else set(tasks)

    def due(lines: list[str]) -> bool:
        finished = [m.group(2) for text in lines if (m := line.match(text))]
        return (not last and bool(finished)) or (last in finished[:-1]) or any(f in beyond for f in finished)
    return due


def wait_until_up(host: LabHost, timeout: float = 300) -> None:
    """Until the host answers again (a reboot a killed run started has ended)."""
    deadline = time.monotonic() + timeout
    while host_down(host):
        assert time.monotonic() < deadline, "the host did not come back from its reboot in 300 s"
        time.sleep(0.5)


def wait_until_quiet(host: LabHost, timeout: float = 300) -> None:
    """Until what a killed run left running on the host has ended: a reboot it started (the host
    answers again; a run started while it is down is unreachable, as `ssh` would be), its scripts
    (`bash -s`, as the tool runs them) and what they started (apt-get, dpkg, curl). A killed
    controller does not stop them, as a real one's power cut would not."""
    deadline = time.monotonic() + timeout
    wait_until_up(host, timeout)
    while host_shows(host, "pgrep -f '^(bash -s|(/usr/bin/)?(apt-get|dpkg|curl) )' >/dev/null || "
                           f"systemctl list-units --no-legend --state=active,activating '{EARLY_UNITS}' | grep -q ."):
        assert time.monotonic() < deadline, "processes of a killed run still running after 300 s"
        time.sleep(0.5)


@dataclass
class Inside:
    """A moment inside a long task: `sign(host, output_lines)` holds only while the task is in flight.
    Due when the chain's boundaries reach `due` (the task itself unless said): a download that starts
    early is due before its role's turn, while no run has started it yet."""

    what: str
    task: str
    sign: Callable[[LabHost, list[str]], bool]
    due: str = ""


def output_says(pattern: str) -> Callable[[LabHost, list[str]], bool]:
    found = re.compile(pattern)
    return lambda host, lines: any(found.search(line) for line in lines[-5:])


EARLY_UNITS = "provision-early-*"


def early_unit_shows(pattern: str) -> Callable[[LabHost, list[str]], bool]:
    """A host unit started early (runner/early.py) is running and its output so far matches `pattern`
    (grep -E): the download is in flight while the controller runs the roles between."""
    script = (f"for log in /var/lib/provision/early/{EARLY_UNITS}/out.log; do "
              'unit=$(basename "$(dirname "$log")"); '
              f'systemctl is-active -q "$unit.service" && grep -qsE {shlex.quote(pattern)} "$log" '
              '&& { echo "$unit: $(tail -n 1 "$log" | cut -c1-160)"; exit 0; }; done; exit 1')
    return lambda host, lines: host_saw(host, script)


INSIDE = [
    # the weights' unit starts after office_cache_client: due before the boundaries get there; its
    # output is the fetch script's `progress=BYTES` lines (provision/ops/hf_fetch.sh)
    Inside("the early weights download (its host unit)", "model: model weights downloaded and verified",
           early_unit_shows("^progress=[1-9]"), due="office_cache_client: apt's proxy detect program"),
    Inside("the driver's apt install", "nvidia_driver: NVIDIA open driver installed and held",
           # apt-get installing the driver's packages, or dpkg unpacking one (other tasks run apt-get too)
           lambda host, lines: host_saw(host, "pgrep -af '^(/usr/bin/)?(apt-get .*install.*nvidia|dpkg .*nvidia)'")),
    Inside("the reboot wait", "nvidia_driver: reboot for the NVIDIA driver",
           lambda host, lines: output_says(r"\| waiting for the reboot")(host, lines) and (
               host_down(host) or host_shows(host, "test ! -e /run/provision/boot-marker"))),
    # the pull's unit starts after the host stack's handlers (it needs `restart docker`: a restart would
    # cut it); its output is the Engine API's JSON lines (provision/ops/docker_pull.sh): layers arriving
    Inside("the early image pull (its host unit)", "model: vLLM image pulled",
           early_unit_shows('"status":"(Pulling fs layer|Waiting|Downloading|Verifying Checksum|Download complete)'),
           due="model: vLLM image loaded from the offline bundle"),
    Inside("the readiness wait", "vllm: vLLM service released and checked",
           output_says(r"\| waiting for vllm: ")),
    Inside("the smoke checks", "vllm: vLLM service released and checked", output_says(r"\| smoke checks of vllm")),
]


def test_the_whole_site_killed_at_every_task_boundary_and_inside_its_long_tasks_converges(site_laptop, figures):
    laptop, host = site_laptop, site_laptop.host
    inventory = laptop.inventory
    tasks = site_tasks(inventory)
    assert {inside.task for inside in INSIDE} | {inside.due for inside in INSIDE if inside.due} <= set(tasks), \
        "a long task was renamed"
    pending = list(INSIDE)
    log: list[str] = []
    kills: list[str] = []
    started = time.monotonic()
    boundary, last, last_static = 1, "", ""
    for _ in range(MAX_RUNS):
        # the task the next boundary run finishes last, and the one after it
        nxt = tasks[tasks.index(last) + 1] if last in tasks[:-1] else (tasks[0] if not last else "")
        after = tasks[tasks.index(nxt) + 1] if nxt in tasks[:-1] else ""
        # an inside kill is due once its task is at most the one after the next boundary: a run whose
        # tasks are quick prints several lines at once, so a boundary run may end past `nxt`
        while pending and after in tasks and tasks.index(pending[0].due or pending[0].task) <= tasks.index(after):
            inside = pending.pop(0)
            wait_until_quiet(host)  # the sign must be this run's, not a killed run's leftover
            run = run_and_kill(inventory, host.name, when=lambda lines, inside=inside: inside.sign(host, lines))
            assert run.killed, f"{inside.what}: the run ended before it:\n{run.output[-3000:]}"
            assert not run.failed, run.output[-3000:]
            done = [name for name in run.finished if name in tasks]
            assert done and tasks.index(done[-1]) < tasks.index(inside.task), \
                f"{inside.what}: killed after {run.finished[-1:]}, not inside {inside.task!r}; seen {SEEN[-1:]}"
            kills.append(f"inside {inside.what}")
            log.append(f"killed inside {inside.what} ({run.seconds:.1f} s)")
        if kills and kills[-1].startswith("inside"):
            wait_until_quiet(host)  # the inside kill may have left the host rebooting
        else:
            # a boundary kill seen late (a loaded machine) may land after the reboot was sent: a run
            # started then is unreachable, as `ssh` would be (seen in CI, run 20: "Error reading SSH
            # protocol banner"); the chain is about what a rerun finds, once the host answers
            wait_until_up(host)
        run = run_and_kill(inventory, host.name, when=one_task_past(host.name, tasks, last, last_static))
        log.append(f"run {boundary}: {'killed after' if run.killed else 'ended after'} "
                   f"{run.finished[-1] if run.finished else '-'} ({run.seconds:.1f} s)")
        assert not run.failed, f"{run.failed} failed after {len(kills)} kills:\n{run.output[-4000:]}"
        if not run.killed:
            assert run.returncode == 0, f"run {boundary} ended with exit code {run.returncode}:\n{run.output[-4000:]}"
            break
        kills.append(f"after {run.finished[-1]}")
        last, boundary = run.finished[-1], boundary + 1
        last_static = last if last in tasks else last_static
    else:
        raise AssertionError(f"no run finished in {MAX_RUNS} runs")
    print(f"\n{len(kills)} kills ({len(INSIDE) - len(pending)} inside long tasks) in "
          f"{time.monotonic() - started:.0f} s:\n  " + "\n  ".join(log))
    assert not pending, f"never reached: {[inside.what for inside in pending]}"
    again = provision("up", str(inventory), json_path=laptop.tmp / "again.json")
    converged = again.returncode == 0 and again.host(host.name)["changed"] == 0
    figures.kills.extend([converged] * len(kills))
    assert converged, again.output[-4000:]
    assert sh(host, "systemctl is-active vllm") == "active"
    assert sh(host, "dpkg --audit; echo audited") == "audited", "dpkg left half-configured packages"
    # nothing half-written: no unit started early left enabled, no script of one (it held the token),
    # no partial file in the weights' cache
    assert sh(host, f"ls /etc/systemd/system | grep -c '^{EARLY_UNITS}' || true") == "0"
    assert sh(host, "find /var/lib/provision/early /var/lib/provision/huggingface -name run.sh -o -name '*.part' "
                    "2>/dev/null | wc -l") == "0"


CACHE = "/var/lib/provision/huggingface"
DOWNLOADING = re.compile(r"\| downloading \S+ .*: [1-9]\d* of \d+ MiB")


def test_a_disk_filled_during_the_weights_download_is_named_and_a_rerun_after_freeing_converges(site_laptop, figures):
    """A small filesystem over the model cache (a 6 MiB tmpfs: the plan's free-space check passes),
    filled by another writer while the 4 MiB of weights arrive. Before: curl's "(23) Failure
    writing output". vLLM keeps serving from the cache folder it was started with."""
    laptop, host = site_laptop, site_laptop.host
    sh(host, f"mount -t tmpfs -o size=6m provision-test-small {CACHE}")
    try:
        def fill_the_disk() -> None:
            sh(host, f"head -c 3M /dev/zero > {CACHE}/other-writer || true")

        run = run_and_kill(laptop.inventory, host.name, "--tags", "model", "--json-file", str(laptop.tmp / "full.json"),
                           when=lambda lines: any(DOWNLOADING.search(line) for line in lines[-3:]),
                           instead=fill_the_disk)
        error = re.sub(r"\s+", " ", run.output)  # the terminal wraps long lines
        named = re.search(rf"not enough disk space for \S+ in {CACHE}/\S+ \(filesystem provision-test-small mounted "
                          rf"on {CACHE}\): (\d+) bytes free, (\d+) bytes needed", error)
        clear = run.injected and bool(run.failed) and named is not None and int(named[1]) < int(named[2])
        figures.faults.append(clear)
        print(named[0] if named else error[-3000:])
        assert clear, error[-3000:]
        # nothing half-written counts as done: no snapshot, no manifest, every blob whole or a .part
        assert sh(host, f"find {CACHE} -name '*.manifest' -o -path '*/refs/*' -type f | wc -l") == "0"
        sh(host, f"rm -f {CACHE}/other-writer")  # space freed
        rerun = laptop.up("disk-freed", "--tags", "model")
        assert rerun.returncode == 0, rerun.output
        again = laptop.up("disk-freed-again", "--tags", "model")
        assert again.returncode == 0 and again.host(host.name)["changed"] == 0, again.output
    finally:
        host.exec(f"umount {CACHE}")


def test_an_ssh_connection_reset_mid_download_is_reported_unreachable_naming_the_task_and_a_rerun_converges(
        site_laptop, figures):
    """The host's sshd processes of the run's connection are killed (the TCP connection closes) while
    the weights download (into an empty cache) is in flight."""
    laptop, host = site_laptop, site_laptop.host
    sh(host, f"mount -t tmpfs -o size=64m provision-test-empty {CACHE}")
    try:
        def reset_the_connection() -> None:
            sh(host, "for pid in $(pgrep -f '^sshd: [a-z]+'); do kill -KILL $pid; done; true")

        started = time.monotonic()
        run = run_and_kill(laptop.inventory, host.name, "--tags", "model",
                           when=lambda lines: any(DOWNLOADING.search(line) for line in lines[-3:]),
                           instead=reset_the_connection, timeout=120)
        took = time.monotonic() - started
        clear = (run.injected and "unreachable" in run.output
                 and "model weights downloaded and verified" in run.output.split("unreachable", 1)[1][:600])
        figures.faults.append(clear)
        print(f"ended {took:.0f} s after start:\n" + "\n".join(run.output.splitlines()[-8:]))
        assert clear, run.output[-3000:]
        rerun = laptop.up("after-reset", "--tags", "model")
        assert rerun.returncode == 0, rerun.output
        again = laptop.up("after-reset-again", "--tags", "model")
        assert again.returncode == 0 and again.host(host.name)["changed"] == 0, again.output
    finally:
        host.exec(f"umount {CACHE}")


def test_a_download_the_hub_refuses_for_good_ends_its_unfollowed_unit_and_the_next_run_names_it(
        site_laptop, tmp_path_factory):
    """The mirror lists a file but answers 404 for it (a lost file: the stand-in's `refuse`), and the
    run is killed once the weights' unit has started early, long before the model's turn would follow
    it. systemd does not restart the unit (RestartPreventExitStatus=) and gives up on it: OnFailure=
    disables it and removes its script, so nothing of it starts at a boot and the token is on no disk
    (runner/early.py). The next `up` names what it left (URL and status) and fails as the download
    does again."""
    laptop, host = site_laptop, site_laptop.host
    lost = start_hub(tmp_path_factory.mktemp("lost-file") / "repo", repo_id="provision-test/lost-file",
                     shard_size=MIB, shards=1, options=HubOptions(token=HF_TOKEN, refuse={"config.json": 404}))
    started = re.compile(r"started early: model weights downloaded and verified \(host unit (provision-early-\w+)\)")
    try:
        laptop.set_vars(hf_model="provision-test/lost-file", hf_endpoint=hub_endpoint(lost))
        run = run_and_kill(laptop.inventory, host.name, when=lambda lines: any(map(started.search, lines[-5:])))
        found = started.search(run.output)
        assert run.killed and found, run.output[-3000:]
        unit, folder = found[1], f"/var/lib/provision/early/{found[1]}"
        deadline = time.monotonic() + 60
        while sh(host, f"test -f {folder}/failed && echo gave-up || true") != "gave-up":
            assert time.monotonic() < deadline, sh(host, f"systemctl status {unit} --no-pager 2>&1 || true")
            time.sleep(0.5)
        time.sleep(6)  # RestartSec=5: a restart would have asked again by now
        asked = [r for r in lost.state.requests if r["path"].endswith("/config.json")]
        assert [r["status"] for r in asked] == [404], "asked once: not restarted, no retry"
        assert sh(host, f"find /etc/systemd/system -name '{unit}*' | wc -l") == "0", "enabled: it would start at boot"
        assert sh(host, f"systemctl is-enabled {unit}.service 2>&1 || true") != "enabled"
        assert sh(host, f"test -e {folder}/run.sh && echo kept || echo gone") == "gone"
        assert sh(host, f"grep -rlF {HF_TOKEN} /var/lib/provision /etc/systemd/system 2>/dev/null || true") == ""
        url = f"{hub_endpoint(lost)}/provision-test/lost-file/resolve/{lost.repository.commit}/config.json"
        journal = sh(host, f"journalctl -o cat --no-pager -u provision-give-up@{unit}.service")
        assert f"{unit}.service ended for good (exit-code, exit status 79): downloading config.json failed for good: " \
               f"HTTP 404 from {url}" in journal, journal
        rerun = laptop.up("after-lost-file", "--tags", "model")
        output = re.sub(r"\s+", " ", rerun.output)  # the terminal wraps long lines
        assert rerun.returncode == 1 and HF_TOKEN not in output, output[-3000:]
        assert (f"model weights downloaded and verified: the host unit {unit} an earlier run left ended by itself at "
                in output), output[-3000:]
        assert f"its command failed for good (exit-code, exit status 79): downloading config.json failed for good: " \
               f"HTTP 404 from {url}" in output, output[-3000:]
        print(output[output.index(f"the host unit {unit} an earlier run"):][:400])
    finally:
        lost.stop()
        laptop.set_vars()

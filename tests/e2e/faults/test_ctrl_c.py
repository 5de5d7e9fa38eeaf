"""Ctrl-C on a real `provision up`: the first press lets apt finish, starts nothing else, prints the
recap and writes the --json document, exit 130; the rerun converges. Before: the run carried on to
the end of the play, then exited 130 with no recap and no document."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

from tests.e2e.helpers import REPO, provision


def test_first_ctrl_c_lets_apt_finish_then_recaps_and_writes_json(lab, tmp_path, figures):
    (host,) = lab.new_hosts(1, prefix="ctrlc")
    inventory = lab.write_inventory(tmp_path / "inventory.yaml", [host])
    document = tmp_path / "interrupted.json"
    argv = [sys.executable, "-m", "provision", "up", str(inventory), "--tags", "docker", "--json-file", str(document)]
    run = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           env={**os.environ, "COLUMNS": "200"})
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and host.exec("pgrep -x apt-get >/dev/null")[0] != 0:
            time.sleep(0.2)
        assert run.poll() is None, "the run ended before apt started"
        run.send_signal(signal.SIGINT)
        output, _ = run.communicate(timeout=300)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait(timeout=30)
    assert host.exec("dpkg --audit")[1].strip() == "", "the apt run in flight was cut short"
    results = json.loads(document.read_text()) if document.exists() else {}
    tasks = results.get("hosts", {}).get(host.name, {}).get("tasks", [])
    clear = (run.returncode == 130 and "PLAY RECAP" in output and "interrupted (Ctrl-C)" in output
             and bool(results) and "interrupted (Ctrl-C)" in json.dumps(results)
             and not any(t["name"] == "Docker enabled and running" for t in tasks))
    figures.faults.append(clear)
    print(output[-4000:])
    assert clear
    rerun = provision("up", str(inventory), "--tags", "docker", json_path=tmp_path / "rerun.json")
    assert rerun.returncode == 0, rerun.output

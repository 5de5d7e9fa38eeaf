"""`dpkg_rows` (provision/facts/dpkg_rows.sh) against dpkg-query itself, on this machine's real
package database: alone, and in a probe batch whose one dpkg-query read every call's patterns; the
batch's rows kept on the host and read back only while the database is unchanged (dpkg_rows_read.sh)."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from provision.facts import dpkg_rows
from provision.facts.dpkg_rows import dpkg_rows_shell, patterns_called
from provision.runner.probe import build_script, split_output
from tests.unit.command_counting import calls, counting

pytestmark = pytest.mark.skipif(shutil.which("dpkg-query") is None, reason="needs a Debian-like machine")

PATTERNS = ["bash", "lib*", "zz-not-a-package", "coreutils", "nvidia-*", "docker.io", "dpkg"]
# the formats the facts' packages section and the apt probe asked dpkg-query for before dpkg_rows
FORMATS = {"facts": "${db:Status-Abbrev} ${Package} ${Version}\n",
           "apt": "${Package}\t${Version}\t${db:Status-Abbrev}\n"}


SHOW = 'printf %s "${dpkg_rows_out:-}"'  # `apt` leaves its rows in dpkg_rows_out (`facts` prints them)


def dpkg_query(name: str, patterns: list[str]) -> str:
    return subprocess.run(["dpkg-query", "-W", f"-f={FORMATS[name]}", "--", *patterns], capture_output=True,
                          text=True).stdout


def test_alone_it_prints_what_dpkg_query_prints():
    words = " ".join(f"'{p}'" for p in PATTERNS[:4])
    for name in FORMATS:
        out = subprocess.run(["bash", "-c", f"{dpkg_rows_shell()}\ndpkg_rows {name} {words}; {SHOW}"],
                             capture_output=True, text=True, check=True).stdout
        assert out == dpkg_query(name, PATTERNS[:4]) and "bash" in out


@pytest.fixture(autouse=True)
def rows_kept_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The batch keeps its rows under tmp_path, not in this machine's /var/lib/provision."""
    folder = tmp_path / "kept"
    folder.mkdir()
    monkeypatch.setattr(dpkg_rows, "ROWS_KEPT", str(folder / "dpkg-rows"))
    return folder


def test_a_batch_reads_the_database_once_and_each_call_gets_its_own_rows(tmp_path: Path):
    env = counting("dpkg-query", tmp_path / "bin")
    asked = [("facts", PATTERNS[:3]), ("apt", PATTERNS[3:]), ("apt", ["bash:amd64"])]
    snippets = [f"{dpkg_rows_shell()}\ndpkg_rows {name} {' '.join(repr(p) for p in words)}; {SHOW}"
                for name, words in asked]
    assert patterns_called(snippets) == PATTERNS  # the architecture-qualified one is left to its own call
    out = subprocess.run(["bash", "-c", build_script(snippets, "tok")], capture_output=True, text=True, check=True,
                         env=env).stdout
    outputs = split_output(out, "tok", 3)
    for (name, words), output in zip(asked, outputs, strict=True):
        assert output == dpkg_query(name, words) and output
    assert (tmp_path / "bin" / "calls").read_text().count("x") == 2  # the batch's one, and bash:amd64's own


def run_batch(env: dict[str, str], patterns: list[str]) -> str:
    """A probe batch of one `dpkg_rows apt` call: its rows."""
    snippet = f"{dpkg_rows_shell()}\ndpkg_rows apt {' '.join(repr(p) for p in patterns)}; {SHOW}"
    out = subprocess.run(["bash", "-c", build_script([snippet], "tok")], capture_output=True, text=True,
                         check=True, env=env).stdout
    return split_output(out, "tok", 1)[0]


@pytest.fixture
def database(tmp_path: Path) -> Path:
    """A copy of this machine's dpkg database (status and journal folder), named by DPKG_ADMINDIR."""
    admin = tmp_path / "dpkg"
    (admin / "updates").mkdir(parents=True)
    shutil.copy2("/var/lib/dpkg/status", admin / "status")
    for path in (admin / "status", admin / "updates", admin):  # written well before the first probe
        os.utime(path, (time.time() - 10, time.time() - 10))
    return admin


def tick() -> None:
    """Let the file system's clock pass a tick (4 ms here): a stamp written within the same tick as the
    status file has its time, not a newer one, and the next probe reads dpkg again (as it should)."""
    time.sleep(0.02)


def newer(path: Path) -> None:
    """Give `path` a modification time a second later than it has."""
    later = path.stat().st_mtime + 1
    os.utime(path, (later, later))


def test_a_converged_rerun_reads_the_kept_rows_and_runs_no_dpkg_query(tmp_path: Path, database: Path,
                                                                      rows_kept_in: Path):
    env = {**counting("dpkg-query", tmp_path / "bin"), "DPKG_ADMINDIR": str(database)}
    first = run_batch(env, ["bash", "coreutils", "dpkg"])
    assert calls(tmp_path / "bin") == 1 and "bash\t" in first
    assert run_batch(env, ["bash", "coreutils", "dpkg"]) == first
    assert calls(tmp_path / "bin") == 1  # the kept rows: no dpkg-query
    # another set of patterns is kept apart (one file each), and each reads back its own
    assert run_batch(env, ["dpkg"]) == dpkg_query("apt", ["dpkg"]) and calls(tmp_path / "bin") == 2
    assert run_batch(env, ["bash", "coreutils", "dpkg"]) == first and calls(tmp_path / "bin") == 2
    assert len(list(rows_kept_in.glob("dpkg-rows-*.checked"))) == 2


def test_a_changed_database_is_read_again(tmp_path: Path, database: Path):
    env = {**counting("dpkg-query", tmp_path / "bin"), "DPKG_ADMINDIR": str(database)}
    rows = run_batch(env, ["bash", "dpkg"])
    assert calls(tmp_path / "bin") == 1 and rows.startswith("bash\t")
    # dpkg removed bash from its status file (rewritten after the read, as dpkg writes it)
    status = database / "status"
    stanzas = status.read_text().split("\n\n")
    status.write_text("\n\n".join(s for s in stanzas if not s.startswith("Package: bash\n")))
    tick()
    rows = run_batch(env, ["bash", "dpkg"])
    assert calls(tmp_path / "bin") == 2 and not rows.startswith("bash\t") and "dpkg\t" in rows
    # an entry in dpkg's journal (an install under way, not yet folded into the status file)
    assert run_batch(env, ["bash", "dpkg"]) == rows and calls(tmp_path / "bin") == 2
    (database / "updates" / "0000").write_text("")  # the folder's time changes with it
    tick()
    run_batch(env, ["bash", "dpkg"])
    assert calls(tmp_path / "bin") == 3
    # a status file with an older time renamed into place (a backup put back by hand): dpkg's folder changed
    (database / "updates" / "0000").unlink()
    tick()
    assert run_batch(env, ["bash", "dpkg"]) == rows and calls(tmp_path / "bin") == 4
    assert run_batch(env, ["bash", "dpkg"]) == rows and calls(tmp_path / "bin") == 4
    shutil.copy2("/var/lib/dpkg/status", database / "status.restored")
    os.utime(database / "status.restored", (time.time() - 60, time.time() - 60))
    (database / "status.restored").rename(database / "status")
    tick()
    assert run_batch(env, ["bash", "dpkg"]).startswith("bash\t") and calls(tmp_path / "bin") == 5


def test_rows_another_probe_stamped_over_or_a_write_cut_short_are_read_again(tmp_path: Path, database: Path,
                                                                             rows_kept_in: Path):
    env = {**counting("dpkg-query", tmp_path / "bin"), "DPKG_ADMINDIR": str(database)}
    rows = run_batch(env, ["bash"])
    (stamp,) = rows_kept_in.glob("dpkg-rows-*.checked")
    kept = Path(str(stamp).removesuffix(".checked"))
    # a second probe stamped after this one's read (its own read may come later): the tokens differ
    stamp.write_text("4242.1.5\n")
    os.utime(stamp, (kept.stat().st_mtime, kept.stat().st_mtime))
    assert run_batch(env, ["bash"]) == rows and calls(tmp_path / "bin") == 2
    # a probe killed between its stamp and its write: the stamp newer than the kept rows
    newer(stamp)
    assert run_batch(env, ["bash"]) == rows and calls(tmp_path / "bin") == 3
    assert run_batch(env, ["bash"]) == rows and calls(tmp_path / "bin") == 3
    assert not list(rows_kept_in.glob("dpkg-rows-*.[0-9]*"))  # no temporary file left
    # a probe killed between its write and its rename left its temporary file: the next write removes it
    Path(f"{kept}.4242").write_text("patterns bash\ntoken 4242.1.5\n")
    newer(stamp)
    assert run_batch(env, ["bash"]) == rows and calls(tmp_path / "bin") == 4
    assert not list(rows_kept_in.glob("dpkg-rows-*.[0-9]*"))


def test_without_the_tools_folder_the_batch_asks_dpkg_every_time(tmp_path: Path, database: Path,
                                                                 monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(dpkg_rows, "ROWS_KEPT", str(tmp_path / "absent" / "dpkg-rows"))
    env = {**counting("dpkg-query", tmp_path / "bin"), "DPKG_ADMINDIR": str(database)}
    assert run_batch(env, ["bash"]) == run_batch(env, ["bash"]) != ""
    assert calls(tmp_path / "bin") == 2 and not (tmp_path / "absent").exists()

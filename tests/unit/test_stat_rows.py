"""The file probes' one `stat` a batch (filestate.stat_prelude) against stat itself, on real files of
this machine: each probe in a batch reads what it reads alone, and the batch runs stat once."""

from __future__ import annotations

import subprocess
from pathlib import Path

from provision.ops.filestate import file_state_probe, parse_file_state
from provision.runner.probe import build_script, split_output
from tests.unit.command_counting import calls, counting


def paths(root: Path) -> list[str]:
    """A directory, files with odd names (a space, a quote, a glob, a name that ends another's), a
    symlink, a missing path."""
    (root / "dir").mkdir()
    for name in ("plain", "with space", "it's", "glob*", "x dir"):
        (root / name).write_text(name)
    (root / "plain").chmod(0o600)
    (root / "link").symlink_to(root / "plain")
    return [str(root / name) for name in ("dir", "plain", "with space", "it's", "glob*", "x dir", "link", "gone")]


def run(script: str, env: dict[str, str]) -> str:
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env, check=True).stdout


def test_a_batch_stats_its_file_probes_once_and_each_reads_what_it_reads_alone(tmp_path: Path):
    (tmp_path / "files").mkdir()
    probed = paths(tmp_path / "files")
    probes = [file_state_probe(path) for path in probed]
    env = counting("stat", tmp_path / "shim")
    alone = [parse_file_state(path, run(probe.snippet, env)) for path, probe in zip(probed, probes, strict=True)]
    calls_alone = calls(tmp_path / "shim")
    (tmp_path / "shim" / "calls").unlink()
    output = run(build_script([probe.snippet for probe in probes], "t0k3n"), env)
    batched = [parse_file_state(path, text)
               for path, text in zip(probed, split_output(output, "t0k3n", len(probes)), strict=True)]
    assert batched == alone
    assert {state.kind for state in alone} == {"directory", "file", "absent"} and alone[1].mode == "0600"
    assert calls_alone == 7  # every path but the missing one (the symlink's: its target)
    # the prelude's one: the symlink's probe reads its target, which the prelude read by its own path
    assert calls(tmp_path / "shim") == 1

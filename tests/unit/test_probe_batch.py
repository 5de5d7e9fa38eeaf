import subprocess

import pytest

from provision.runner.probe import build_script, split_output


def run_bash(script: str) -> str:
    return subprocess.run(["bash", "-c", "set -euo pipefail\n" + script], capture_output=True, text=True,
                          check=True).stdout


def test_batch_runs_every_snippet_even_when_one_fails():
    snippets = ["echo one", "false; exit 3", "printf 'a\\nb\\n'"]
    out = run_bash(build_script(snippets, "tok"))
    assert split_output(out, "tok", 3) == ["one\n", "", "a\nb\n"]


def test_snippet_cannot_read_the_rest_of_the_script_from_stdin():
    out = run_bash(build_script(["cat", "echo after"], "tok"))
    assert split_output(out, "tok", 2) == ["", "after\n"]


def test_truncated_output_is_an_error():
    with pytest.raises(ValueError, match="incomplete"):
        split_output("@@tok 0\nx\n", "tok", 1)


def test_wrapped_script_runs_with_stdin_closed_and_payload_on_fd3():
    from provision.connection.base import wrap_script

    script = wrap_script('cat; echo "rest ran"; cat <&3', b"secret payload\n")
    assert "secret payload" not in script
    done = subprocess.run(["bash", "-s"], input=script, capture_output=True, text=True, check=True)
    assert done.stdout == "rest ran\nsecret payload\n"

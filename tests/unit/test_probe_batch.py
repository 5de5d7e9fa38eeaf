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


def test_snippets_run_at_once_and_print_in_order(tmp_path):
    flag = tmp_path / "second-ran"
    # the first waits (5 s at most) for a file only the second makes: one by one it would see none
    first = f"for _ in $(seq 50); do [ -e {flag} ] && break; sleep 0.1; done; [ -e {flag} ] && echo saw-second"
    out = run_bash(build_script([first, f"touch {flag}; echo second", "echo third"], "tok"))
    assert split_output(out, "tok", 3) == ["saw-second\n", "second\n", "third\n"]


def test_without_a_temp_folder_they_run_one_by_one_and_none_is_left(tmp_path):
    script = build_script(["echo a", "echo b"], "tok")
    unwritable = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True,
                                env={"PATH": "/usr/bin:/bin", "TMPDIR": str(tmp_path / "missing")}).stdout
    assert split_output(unwritable, "tok", 2) == ["a\n", "b\n"]
    subprocess.run(["bash", "-c", script], capture_output=True, check=True,
                   env={"PATH": "/usr/bin:/bin", "TMPDIR": str(tmp_path)})
    assert list(tmp_path.iterdir()) == []  # the outputs' folder went with the script

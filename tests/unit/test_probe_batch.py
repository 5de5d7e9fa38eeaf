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


def test_outputs_touch_no_disk_and_need_no_temp_folder(tmp_path):
    # some outputs are secret (the API key's probe): they go through pipes, never a file
    script = build_script(["echo a", "echo b"], "tok")
    for tmpdir in (tmp_path / "missing", tmp_path):
        out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True,
                             env={"PATH": "/usr/bin:/bin", "TMPDIR": str(tmpdir)}).stdout
        assert split_output(out, "tok", 2) == ["a\n", "b\n"]
    assert list(tmp_path.iterdir()) == []


def test_many_snippets_stay_within_the_open_files_limit_and_big_outputs_wait_their_turn():
    # a pipe a snippet: 1,200 at once would pass the 1024 open files a session usually may have
    snippets = [f"echo {index}" for index in range(1200)]
    big = "head -c 300000 /dev/zero | tr '\\0' x; echo"  # more than a pipe holds (64 KiB)
    snippets[:3] = [big, "echo 1", big]
    out = subprocess.run(["bash", "-c", "ulimit -n 1024\n" + build_script(snippets, "tok")], capture_output=True,
                         text=True, check=True).stdout
    outputs = split_output(out, "tok", 1200)
    assert [len(text) for text in outputs[:3]] == [300001, 2, 300001]
    assert outputs[3:] == [f"{index}\n" for index in range(3, 1200)]


def test_quick_snippets_share_one_process_and_each_keeps_its_own_output():
    from provision.shell import QUICK_PROBE

    pid = "echo $BASHPID"
    snippets = [pid, QUICK_PROBE + pid, pid, QUICK_PROBE + "false; " + pid, QUICK_PROBE + "printf 'a\\nb\\n'"]
    outputs = split_output(run_bash(build_script(snippets, "tok")), "tok", 5)
    assert outputs[4] == "a\nb\n"
    assert outputs[1] == outputs[3]  # the quick ones: one process, in turn
    assert len({outputs[0], outputs[1], outputs[2]}) == 3  # the others: a process each


def test_sections_are_read_by_their_index_whatever_order_they_came_in():
    out = "@@tok 1\nb\n@@tok 0 secret\na\n@@tok end\n"
    assert split_output(out, "tok", 2) == ["a\n", "b\n"]
    with pytest.raises(ValueError, match="incomplete"):
        split_output("@@tok 1\nb\n@@tok end\n", "tok", 2)



def test_with_one_snippet_that_may_wait_the_quick_ones_run_in_the_batch_shell_and_no_cat():
    from provision.shell import QUICK_PROBE

    pid = "echo $BASHPID"
    script = build_script([pid, QUICK_PROBE + pid, QUICK_PROBE + "printf 'a\\n\\nb\\n'"], "tok")
    assert "cat " not in script
    shell, out = run_bash(f"echo $$\n{script}").split("\n", 1)
    outputs = split_output(out, "tok", 3)
    assert outputs[1] == f"{shell}\n"  # the quick one: in the batch's own shell, no fork
    assert outputs[0] != outputs[1]  # the other: a subshell
    assert outputs[2] == "a\n\nb\n"


def test_a_script_read_at_once_runs_whole_keeps_stdin_and_never_runs_cut_short():
    """`read_at_once` (what the SSH connection sends to `bash -s`): multi-byte text, a payload on fd 3,
    the rest of stdin left to the script (the run lock reads it); a script cut short runs nothing."""
    from provision.connection.base import read_at_once, wrap_script

    script = wrap_script('echo "héllo"; cat <&3; read -r line; echo "then: $line"', b"payload\n", keep_stdin=True)
    done = subprocess.run(["bash", "-s"], input=read_at_once(script) + b"from the controller\n", capture_output=True,
                          check=True)
    assert done.stdout.decode() == "héllo\npayload\nthen: from the controller\n"
    cut = read_at_once(wrap_script("echo ran", None))[:-5]
    done = subprocess.run(["bash", "-s"], input=cut, capture_output=True, check=False)
    assert done.stdout == b"" and done.returncode != 0

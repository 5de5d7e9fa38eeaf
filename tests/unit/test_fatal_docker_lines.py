"""docker's own lines in the unit's journal: the one a first start always prints is no failure.

The vLLM unit removes a leftover container before it starts one (`ExecStartPre=-docker rm -f vllm`);
when there is none, docker prints "Error response from daemon: No such container: vllm" (observed on
this machine's docker 20.10.24, `docker rm -f` of an absent name, rc 0, and on the lab's docker.io 26).
Read as docker's failure, it ended every first start on the spot."""

from __future__ import annotations

from provision.vllm.fatal import find_fatal

NO_SUCH = "Error response from daemon: No such container: vllm"
# docker's refusal of the GPU request, as the NVIDIA hook reports it (fatal.py's docstring)
REFUSED = ("docker: Error response from daemon: failed to create task for container: failed to create shim "
           "task: OCI runtime create failed: runc create failed: unable to start container process: "
           "error during container init: error running hook #0: error running hook: exit status 1, stdout: , "
           "stderr: Auto-detected mode as 'legacy'")


def test_the_removal_of_an_absent_container_before_a_first_start_is_no_failure() -> None:
    assert find_fatal([NO_SUCH, "INFO 02-06 16:33:40 [api_server.py:1351] vLLM API server version 0.15.0"]) is None
    assert find_fatal([NO_SUCH]) is None


def test_a_real_refusal_from_the_daemon_still_is_one() -> None:
    fatal = find_fatal([NO_SUCH, REFUSED])
    assert fatal is not None and fatal.cause == "docker_failed"

"""A corpus of bad settings: each exits 2 naming file:line:key, and no host is contacted.

The inventory's host is a TCP listener standing in for sshd that records every connection, so a
command that touched the host before refusing would show up; the last test proves the listener sees
a command that does connect.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.unit.test_cli_input_errors import listener, provision

__all__ = ["listener"]
REPO = Path(__file__).resolve().parents[2]

HOST = """\
name: lab1
address: 127.0.0.1
port: PORT
vars:
  {setting}
"""
FLEET = """\
all:
  hosts:
    lab1: {{ansible_host: 127.0.0.1, ansible_port: PORT}}
  children:
    gpus:
      hosts: {{lab1: }}
      vars:
        {setting}
"""

# name -> (form, the setting's line, where (":line"), key, words the message must hold)
CORPUS = {
    "typo": (HOST, "gpu_memory_utilisation: 0.8", ":5", "gpu_memory_utilisation",
             "did you mean 'gpu_memory_utilization'"),
    "typo of the context": (HOST, "max_model_length: 32768", ":5", "max_model_length", "did you mean 'max_model_len'"),
    "out of range": (HOST, "gpu_memory_utilization: 1.5", ":5", "gpu_memory_utilization",
                     "expected a number from 0.1 to 0.99; got 1.5"),
    "wrong type": (HOST, "max_num_seqs: four", ":5", "max_num_seqs", "expected an integer from 1 to 1024; got 'four'"),
    "negative context": (HOST, "max_model_len: -5", ":5", "max_model_len",
                         "expected an integer from 1 to 262144 (model_architecture.max_position_embeddings), "
                         "or 'auto'; got -5"),
    "context beyond the model": (HOST, "max_model_len: 300000", ":5", "max_model_len", "got 300000"),
    "not a choice": (HOST, "nvidia_reboot: sometimes", ":5", "nvidia_reboot", "expected one of 'ask', 'auto', 'never'"),
    "bad extra flag": (HOST, "vllm_extra_flags: {enforce-eagr: true}", ":5", "vllm_extra_flags.enforce-eagr",
                       "not a flag of vLLM 0.21.0 `vllm serve` (did you mean 'enforce-eager'?)"),
    "flag with a variable of its own": (HOST, "vllm_extra_flags: {max-model-len: 4096}", ":5",
                                        "vllm_extra_flags.max-model-len", "set by the variable max_model_len"),
    "no --no- form": (HOST, "vllm_extra_flags: {port: false}", ":5", "vllm_extra_flags.port",
                      "--port takes a value; false"),
    # the values vLLM 0.21.0's own parser refuses (choices and types read from its source by
    # tests/tools/extract_vllm_flags.py into roles/vllm/meta/vllm-serve-flags.txt)
    "flag value not among vLLM's choices": (HOST, "vllm_extra_flags: {kv-cache-dtype: fp7}", ":5",
                                            "vllm_extra_flags.kv-cache-dtype",
                                            "--kv-cache-dtype takes one of 'auto', 'bfloat16', 'float16', 'fp8', "),
    "the choices' suggestion": (HOST, "vllm_extra_flags: {kv-cache-dtype: fp7}", ":5",
                                "vllm_extra_flags.kv-cache-dtype", "got 'fp7' (did you mean 'fp8'?)"),
    "integer choices": (HOST, "vllm_extra_flags: {max-lora-rank: 24}", ":5", "vllm_extra_flags.max-lora-rank",
                        "--max-lora-rank takes one of 1, 8, 16, 32, 64, 128, 256, 320, 512 (vLLM 0.21.0 `vllm serve`)"
                        "; got 24"),
    "a fraction for an integer flag": (HOST, "vllm_extra_flags: {seed: 1.5}", ":5", "vllm_extra_flags.seed",
                                       "--seed takes an integer; got 1.5"),
    "a size for a flag read by int()": (HOST, "vllm_extra_flags: {max-loras: 2k}", ":5", "vllm_extra_flags.max-loras",
                                        "--max-loras takes an integer; got '2k'"),
    "a list item of the wrong type": (HOST, "vllm_extra_flags: {cudagraph-capture-sizes: [1, two]}", ":5",
                                          "vllm_extra_flags.cudagraph-capture-sizes",
                                          "--cudagraph-capture-sizes takes an integer; got 'two'"),
    "in group vars": (FLEET, "max_num_batched_tokens: 0", ":8", "max_num_batched_tokens", "of at least 1; got 0"),
    "typo in group vars": (FLEET, "smoke_vison: false", ":8", "smoke_vison", "did you mean 'smoke_vision'"),
    "unknown model": (HOST, "model: qwen2.5-vl", ":5", "model",
                      "no model profile 'qwen2.5-vl' in roles/vllm/models (did you mean 'qwen2.5-vl-7b-awq'?)"),
    "model architecture key": (HOST, "model_architecture: {layers: 2, ful: {}}", ":5", "model_architecture",
                               "ful: not a key of model_architecture (did you mean 'full'?)"),
    "secret of the wrong type": (HOST, "hf_token: 12345", ":5", "hf_token",
                                 "expected a token (letters, digits, . _ ~ + / = : -); got a secret value"),
}


def write(tmp_path, form: str, setting: str, port: int):
    path = tmp_path / "inventory.yaml"
    path.write_text(form.format(setting=setting).replace("PORT", str(port)))
    return path


@pytest.mark.parametrize("case", CORPUS)
def test_bad_setting_exits_2_naming_file_line_key_before_any_contact(case, tmp_path, listener):
    port, connections = listener
    form, setting, where, key, words = CORPUS[case]
    inventory = write(tmp_path, form, setting, port)
    done = provision("up", str(inventory), "--check")
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"{inventory}{where}: {key}: " in done.stderr
    assert words in done.stderr
    assert connections == []


# a profile file's broken line -> (what the profile line becomes, words the message must hold)
BROKEN_PROFILES = {
    "a value of the wrong type": ("max_num_seqs: four", ":18: max_num_seqs: expected an integer"),
    "an undeclared key": ("max_num_seq: 4", ":18: max_num_seq: no role declares this variable (did you mean"),
    "not a mapping": ("- a list", ":18: YAML syntax error"),
}


@pytest.mark.parametrize("case", BROKEN_PROFILES)
def test_a_broken_profile_is_refused_at_its_own_line(case, tmp_path, listener):
    port, connections = listener
    roles = tmp_path / "roles"
    shutil.copytree(REPO / "roles", roles)
    profile = roles / "vllm/models/gemma-4-26b-a4b-awq.yaml"
    line, words = BROKEN_PROFILES[case]
    profile.write_text(profile.read_text().replace("max_num_seqs: 4  ", line + "  "))
    inventory = write(tmp_path, HOST, "max_model_len: 4096", port)
    done = provision("up", str(inventory), "--check", "--roles-path", str(roles))
    assert done.returncode == 2, done.stdout + done.stderr
    assert str(profile) + words in done.stderr
    assert connections == []


def test_a_profile_that_leaves_out_a_model_setting_is_refused(tmp_path, listener):
    port, connections = listener
    roles = tmp_path / "roles"
    shutil.copytree(REPO / "roles", roles)
    profile = roles / "vllm/models/qwen2.5-vl-7b-awq.yaml"
    profile.write_text(profile.read_text().replace("max_num_batched_tokens: 8192", ""))
    inventory = write(tmp_path, HOST, "model: qwen2.5-vl-7b-awq", port)
    done = provision("render", str(inventory), "--roles-path", str(roles))
    assert done.returncode == 2
    assert ("max_num_batched_tokens: has no value: no role default, and the model profile 'qwen2.5-vl-7b-awq' "
            f"({inventory}:5) does not set it") in done.stderr
    assert connections == []


@pytest.mark.parametrize("command", ["up", "facts", "plan", "status", "smoke", "bench", "rollback", "render"])
def test_every_command_that_reads_an_inventory_checks_it_first(command, tmp_path, listener):
    port, connections = listener
    inventory = write(tmp_path, HOST, "max_num_seqs: four", port)
    done = provision(command, str(inventory))
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"{inventory}:5: max_num_seqs: expected an integer" in done.stderr
    assert connections == []


def test_extra_vars_are_named_as_such(tmp_path, listener):
    port, connections = listener
    inventory = write(tmp_path, HOST, "max_num_seqs: 4", port)
    done = provision("up", str(inventory), "--check", "-e", "gpu_memory_utilization=1.5", "-e", "max_model_length=1")
    assert done.returncode == 2
    assert "-e: gpu_memory_utilization: expected a number from 0.1 to 0.99; got 1.5" in done.stderr
    assert "-e: max_model_length: no role declares this variable (did you mean 'max_model_len'?)" in done.stderr
    assert connections == []


def test_every_problem_is_listed_at_once(tmp_path, listener):
    port, _ = listener
    inventory = write(tmp_path, HOST, "max_num_seqs: four\n  gpu_memory_utilisation: 0.8", port)
    done = provision("render", str(inventory))
    assert done.returncode == 2
    assert f"{inventory}:5: max_num_seqs" in done.stderr and f"{inventory}:6: gpu_memory_utilisation" in done.stderr


def test_a_users_own_declared_variable_passes(tmp_path, listener):
    port, _ = listener
    inventory = write(tmp_path, HOST, "vars_declared: {office: {type: str, description: where it stands}}\n"
                                      "  office: Berlin", port)
    done = provision("render", str(inventory))
    assert done.returncode == 0, done.stderr
    inventory.write_text(inventory.read_text().replace("office: Berlin", "office: 7"))
    done = provision("render", str(inventory))
    assert done.returncode == 2 and f"{inventory}:6: office: expected a string; got 7" in done.stderr


def test_the_listener_does_see_a_command_that_connects(tmp_path, listener):
    port, connections = listener
    inventory = write(tmp_path, HOST, "max_num_seqs: 4", port)
    done = provision("facts", str(inventory))
    assert done.returncode == 1
    assert connections, "the corpus above would not notice a contact"


@pytest.mark.parametrize(("setting", "rendered"), [
    ("vllm_extra_flags: {enforce-eager: true, enable-prefix-caching: false, speculative-config: null}",
     ["--enforce-eager\n", "--no-enable-prefix-caching\n"]),
    # values vLLM's parser takes: a size where it reads one (human_readable_int), an integer choice, a
    # list of integers, a choice
    ("vllm_extra_flags: {kv-cache-memory-bytes: 8G, max-lora-rank: 64, cudagraph-capture-sizes: [1, 2, 4], "
     "kv-cache-dtype: fp8_e5m2}",
     ["--kv-cache-memory-bytes\n8G\n", "--cudagraph-capture-sizes\n1\n2\n4\n", "--kv-cache-dtype\nfp8_e5m2\n"]),
])
def test_a_valid_setting_is_not_refused(tmp_path, listener, setting: str, rendered: list[str]):
    port, _ = listener
    done = provision("render", str(write(tmp_path, HOST, setting, port)))
    assert done.returncode == 0, done.stderr
    assert [line for line in rendered if line not in done.stdout] == []

"""Every operation: registered under its name, strict arguments, and a probe that is safe to splice
into the runner's shared `set +e` script (parses, cannot exit it, does not eat its stdin)."""

from __future__ import annotations

import subprocess

import pytest
from pydantic import ValidationError

from provision.ops import REGISTRY
from tests.unit.ops_support import assert_bash_parses, make_args

SAMPLES = {
    "apt": {"name": ["curl"], "hold": True},
    "apt_components": {"path": "/nonexistent/sources.list", "components": ["contrib"]},
    "apt_repository": {"name": "x", "uris": ["https://example.invalid/debian"], "suites": ["bookworm"],
                       "components": ["main"], "key_url": "https://example.invalid/key"},
    "command": {"cmd": "true", "creates": "/nonexistent", "removes": "/tmp", "unless": "exit 1"},
    "debug": {"msg": "found"},
    "docker_image": {"image": "registry.invalid/x:1"},
    "generated_secret": {"path": "/nonexistent/key"},
    "hf_snapshot": {"repo": "org/model", "cache_dir": "/nonexistent/hf"},
    "vllm_release": {"served_name": "m", "image": "registry.invalid/vllm:1", "model": "org/model",
                     "flags": {"served-model-name": "m"},
                     "state_dir": "/nonexistent/state", "env_file": "/nonexistent/env"},
    "vllm_memory": {"name": "vllm", "state_dir": "/nonexistent/state"},
    "vllm_rollback": {"served_name": "m", "state_dir": "/nonexistent/state", "env_file": "/nonexistent/env"},
    "vllm_smoke": {"served_name": "m", "state_dir": "/nonexistent/state", "env_file": "/nonexistent/env"},
    "directory": {"path": "/nonexistent/dir"},
    "fail": {"msg": "no"},
    "file": {"dest": "/nonexistent/file", "content": "x"},
    "template": {"dest": "/nonexistent/file", "src": "x.j2", "content": "x"},
    "ini": {"path": "/nonexistent/x.ini", "section": "a", "option": "b", "value": "c"},
    "json_merge": {"path": "/nonexistent/x.json", "merge": {"a": 1}},
    "lineinfile": {"path": "/nonexistent/x", "line": "a"},
    "memory_plan": {"model_architecture": {}, "max_model_len": "auto", "gpu_memory_utilization": 0.9,
                    "kv_cache_dtype": "fp8", "max_num_batched_tokens": 8192},
    "mirror_choice": {"component": "hub", "mirror": "http://127.0.0.1:1", "upstream": "https://huggingface.co"},
    "reboot": {"reason": "test"},
    "systemd": {"name": "surely-not-a-unit.service", "state": "started"},
    "verify": {"cmd": "test -e /nonexistent"},
    "wait_for": {"port": 1},
}


def test_every_operation_of_the_brief_is_registered() -> None:
    assert sorted(REGISTRY) == sorted(SAMPLES)


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_unknown_arguments_are_refused(name: str) -> None:
    with pytest.raises(ValidationError, match="Extra inputs are not permitted"):
        make_args(name, **SAMPLES[name], surely_not_an_argument=1)


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_probe_is_safe_inside_the_shared_script(name: str) -> None:
    snippet = REGISTRY[name].probe(make_args(name, **SAMPLES[name]))
    assert_bash_parses(snippet)
    script = f"set +e\n{snippet}\necho '@@after'\ncat\n"
    done = subprocess.run(["bash", "-c", script], input="@@stdin-kept\n", capture_output=True, text=True,
                          timeout=30, check=False)
    assert done.stdout.endswith("@@after\n@@stdin-kept\n"), done.stdout

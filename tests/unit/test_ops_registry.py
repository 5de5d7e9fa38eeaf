"""Every operation: registered under its name, strict arguments, and a probe that is safe to splice
into the runner's shared `set +e` script (parses, cannot exit it, does not eat its stdin)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from pydantic import ValidationError

from provision.ops import REGISTRY
from tests.unit.ops_support import assert_bash_parses, make_args
from tests.unit.vllm_service_support import RELEASE_SETTINGS, role_service

SERVICE = role_service(served_name="m", state_dir="/nonexistent/state", env_file="/nonexistent/env")

SAMPLES = {
    "apt": {"name": ["curl"], "hold": True},
    "apt_components": {"path": "/nonexistent/sources.list", "components": ["contrib"]},
    "apt_repository": {"name": "x", "uris": ["https://example.invalid/debian"], "suites": ["bookworm"],
                       "components": ["main"], "key_url": "https://example.invalid/key"},
    "bundle_copy": {"source": "/nonexistent/bundle", "dest": "/nonexistent/dest",
                    "files": [{"path": "apt/x/Packages", "size": 3, "sha256": "0" * 64}]},
    "docker_load": {"dir": "/nonexistent/bundle",
                    "images": [{"reference": "r.invalid/x:1", "file": "images/x.tar", "id": "sha256:" + "0" * 64}]},
    "command": {"cmd": "true", "creates": "/nonexistent", "removes": "/tmp", "unless": "exit 1"},
    "debug": {"msg": "found"},
    "docker_image": {"image": "registry.invalid/x:1"},
    "generated_secret": {"path": "/nonexistent/key"},
    "hf_snapshot": {"repo": "org/model", "cache_dir": "/nonexistent/hf"},
    "vllm_release": {"service": SERVICE, "image": "registry.invalid/vllm:1", "image_pinned": "", "model": "org/model",
                     "flags": {"served-model-name": "m"}, "weights": {}, "volumes": [], "env": {}, "api_key": "",
                     **RELEASE_SETTINGS},
    "vllm_memory": {"service": SERVICE, "planned": {}},
    "vllm_rollback": {"service": SERVICE},
    "vllm_smoke": {"service": SERVICE},
    "directory": {"path": "/nonexistent/dir"},
    "fail": {"msg": "no"},
    "file": {"dest": "/nonexistent/file", "content": "x"},
    "template": {"dest": "/nonexistent/file", "src": "x.j2", "content": "x"},
    "ini": {"path": "/nonexistent/x.ini", "section": "a", "option": "b", "value": "c"},
    "json_merge": {"path": "/nonexistent/x.json", "merge": {"a": 1}},
    "lineinfile": {"path": "/nonexistent/x", "line": "a"},
    "memory_plan": {"model_architecture": {}, "max_model_len": "auto", "gpu_memory_utilization": 0.9,
                    "kv_cache_dtype": "fp8", "max_num_batched_tokens": 8192, "min_full_sequences": 1,
                    "overhead_gib": 1.8, "gpu_profiles": []},
    "mirror_choice": {"component": "hub", "mirror": "http://127.0.0.1:1", "upstream": "https://huggingface.co"},
    "reboot": {"reason": "test"},
    "systemd": {"name": "surely-not-a-unit.service", "state": "started"},
    "verify": {"cmd": "test -e /nonexistent"},
    "wait_for": {"port": 1},
    "dpkg_lock_wait": {"timeout": 5},
}


def test_every_operation_of_the_brief_is_registered() -> None:
    assert sorted(REGISTRY) == sorted(SAMPLES)


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_unknown_arguments_are_refused(name: str) -> None:
    with pytest.raises(ValidationError, match="Extra inputs are not permitted"):
        make_args(name, **SAMPLES[name], surely_not_an_argument=1)


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_probe_is_safe_inside_the_shared_script(name: str) -> None:
    probe = REGISTRY[name].probe(make_args(name, **SAMPLES[name]))
    snippet = probe.snippet if probe is not None else ""
    assert_bash_parses(snippet)
    script = f"set +e\n{snippet}\necho '@@after'\ncat\n"
    done = subprocess.run(["bash", "-c", script], input="@@stdin-kept\n", capture_output=True, text=True,
                          timeout=30, check=False)
    assert done.stdout.endswith("@@after\n@@stdin-kept\n"), done.stdout


def test_every_entry_of_the_name_table_imports_and_registers_exactly_its_names() -> None:
    """The lazy table (provision/ops/__init__.py) and the modules' `@register`s agree: no operation a
    module registers is missing from the table, and no entry names a module that does not define it."""
    import importlib
    import pkgutil

    import provision.ops
    import provision.vllm.ops
    from provision.ops import OPERATION_MODULES
    from provision.ops.base import REGISTERED, Operation

    for package in (provision.ops, provision.vllm.ops):
        for module in pkgutil.iter_modules(package.__path__):
            importlib.import_module(f"{package.__name__}.{module.name}")
    by_module = {name: type(op).__module__ for name, op in REGISTERED.items()}
    assert by_module == OPERATION_MODULES
    assert all(isinstance(REGISTRY[name], Operation) and REGISTRY[name].name == name for name in OPERATION_MODULES)


def test_looking_an_operation_up_imports_only_its_module() -> None:
    """A fresh interpreter: the table's names are known without importing any operation; one lookup
    imports that operation's module and not the others."""
    code = ("import sys; from provision.ops import REGISTRY; assert 'apt' in REGISTRY;"
            "assert not [m for m in sys.modules if m.startswith('provision.ops.') or m == 'pydantic'];"
            "REGISTRY['systemd']; assert 'provision.ops.systemd' in sys.modules;"
            "assert 'provision.ops.apt' not in sys.modules and 'provision.vllm.ops.vllm_release' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)

"""The profile's flags become `vllm serve` arguments by one rule, and vLLM's own parser accepts them."""

from __future__ import annotations

from pathlib import Path

import pytest

from provision.cli.endpoints import serving_play
from provision.cli.serving import RELEASE_OP, rendered_arguments
from provision.errors import InputError
from provision.inventory.loader import load_inventory
from provision.playbook.loader import load_playbook
from provision.playbook.templating import Renderer, make_environment
from provision.settings.variables import host_variables
from provision.vllm.argv import FlagError, fingerprint, flags_to_argv, serve_arguments
from tests.standins.vllm.server import parse_command_line

REPO_ROOT = Path(__file__).resolve().parents[2]
SITE = REPO_ROOT / "playbooks" / "site.yaml"
# the seed's command, plus the graceful stop (roles/vllm/defaults.yaml vllm_shutdown_timeout)
SEED = ["vllm", "serve", "cyankiwi/gemma-4-26B-A4B-it-AWQ-4bit", "--served-model-name", "workhorse",
        "--revision", "main", "--tokenizer-revision", "main", "--max-model-len", "131072",
        "--gpu-memory-utilization", "0.92", "--max-num-seqs", "4",
        "--max-num-batched-tokens", "8192", "--shutdown-timeout", "120",
        "--attention-backend", "TRITON_ATTN", "--kv-cache-dtype", "fp8",
        "--enable-prefix-caching", "--limit-mm-per-prompt", '{"image":1,"video":0}', "--host", "0.0.0.0",
        "--port", "8000"]


def test_each_kind_of_value_has_one_rendering() -> None:
    flags = {"max_model_len": 131072, "gpu-memory-utilization": 0.92, "enable-prefix-caching": True,
             "enforce-eager": False, "limit-mm-per-prompt": {"image": 1, "video": 0},
             "served-model-name": ["a", "b"], "dropped": None, "--kv-cache-dtype": "fp8"}
    assert flags_to_argv(flags) == [
        "--max-model-len", "131072", "--gpu-memory-utilization", "0.92", "--enable-prefix-caching",
        "--no-enforce-eager", "--limit-mm-per-prompt", '{"image":1,"video":0}', "--served-model-name", "a", "b",
        "--kv-cache-dtype", "fp8"]


@pytest.mark.parametrize("flag", ["api-key", "api_key", "--hf-token", "model"])
def test_secrets_and_the_model_are_never_flags(flag: str) -> None:
    with pytest.raises(FlagError, match="refused"):
        flags_to_argv({flag: "x"})


def test_bad_names_and_empty_lists_are_refused() -> None:
    with pytest.raises(FlagError):
        flags_to_argv({"max model len": 1})
    with pytest.raises(FlagError, match="empty list"):
        flags_to_argv({"served-model-name": []})
    with pytest.raises(FlagError):
        serve_arguments("--model", {})


def test_fingerprint_follows_the_arguments() -> None:
    assert fingerprint(["a", "--b"]) == fingerprint(["a", "--b"]) != fingerprint(["a", "--c"])


def test_default_profile_renders_the_seed_command_exactly() -> None:
    rendered = rendered_arguments(REPO_ROOT / "inventory" / "host.yaml", None, [], SITE)
    assert rendered == {"workhorse": SEED}


def test_default_profile_parses_under_vllms_own_argument_parser() -> None:
    argv = rendered_arguments(REPO_ROOT / "inventory" / "host.yaml", None, [], SITE)["workhorse"]
    parsed = parse_command_line(argv[1:], "vllm")
    assert parsed.model == "cyankiwi/gemma-4-26B-A4B-it-AWQ-4bit"
    assert (parsed.max_model_len, parsed.gpu_memory_utilization, parsed.max_num_seqs) == (131072, 0.92, 4)
    assert parsed.max_num_batched_tokens == 8192 and parsed.kv_cache_dtype == "fp8"
    assert parsed.attention_backend == "TRITON_ATTN" and parsed.enable_prefix_caching is True
    assert parsed.limit_mm_per_prompt == {"image": 1, "video": 0}
    assert parsed.api_key is None and parsed.quantization is None
    assert parsed.revision == parsed.tokenizer_revision == "main"


def test_inventory_overrides_reach_the_arguments_per_host() -> None:
    rendered = rendered_arguments(REPO_ROOT / "inventory" / "office.yaml", "desk-1,eng-3", [], SITE)
    desk, eng = rendered["desk-1"], rendered["eng-3"]
    assert desk[desk.index("--max-model-len") + 1] == "32768" and desk[desk.index("--max-num-seqs") + 1] == "2"
    assert eng[eng.index("--max-model-len") + 1] == "131072" and eng[eng.index("--max-num-seqs") + 1] == "3"


def test_extra_flags_add_override_and_drop_without_restating_the_profile() -> None:
    extra = '{"vllm_extra_flags": {"enforce-eager": true, "kv-cache-dtype": "auto", "enable-prefix-caching": null}}'
    argv = rendered_arguments(REPO_ROOT / "inventory" / "host.yaml", None, [extra], SITE)["workhorse"]
    assert "--enforce-eager" in argv and argv[argv.index("--kv-cache-dtype") + 1] == "auto"
    assert "--enable-prefix-caching" not in argv and "--attention-backend" in argv
    parse_command_line(argv[1:], "vllm")


def test_a_refused_flag_in_the_inventory_is_an_input_error() -> None:
    with pytest.raises(InputError, match="api-key"):
        rendered_arguments(REPO_ROOT / "inventory" / "host.yaml", None,
                           ['{"vllm_extra_flags": {"api-key": "x"}}'], SITE)


def test_a_service_mapping_missing_a_value_is_an_input_error_naming_it() -> None:
    """The settings check refuses it before contact, as every command (`up`, `render`, `status`) reads it."""
    with pytest.raises(InputError, match=r"vllm_service: port: missing \(required\)"):
        rendered_arguments(REPO_ROOT / "inventory" / "host.yaml", None,
                           ['{"vllm_service": {"name": "vllm", "served_name": "x"}}'], SITE)


def test_a_stop_lets_vllm_drain_its_requests_before_docker_kills_it() -> None:
    """The release task's stop_timeout (docker stop -t) follows vllm_shutdown_timeout, 15 s longer."""
    play = serving_play(load_playbook(SITE, REPO_ROOT / "roles"), SITE)
    task = next(t for t in play.tasks if t.op == RELEASE_OP)
    host = load_inventory(REPO_ROOT / "inventory" / "host.yaml").hosts[0]
    for extra, expected in (({}, 135), ({"vllm_shutdown_timeout": 300}, 315)):
        renderer = Renderer(make_environment(play.template_dirs), {**host_variables(play, host, extra), "facts": {}})
        assert renderer.render(task.args["stop_timeout"]) == expected

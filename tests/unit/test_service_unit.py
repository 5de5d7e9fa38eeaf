"""The systemd unit runs the container as REFERENCE.md §5 asks, and its ExecStart splits back exactly."""

from __future__ import annotations

import pytest

from provision.secrets import Secret
from provision.vllm.unit import ContainerUnit, render_env_file, render_unit, systemd_word
from tests.unit.vllm_service_support import UNIT_SETTINGS


def systemd_split(line: str) -> list[str]:
    """ExecStart's word splitting as systemd.service(5) documents it: whitespace separates words;
    single or double quotes wrap a word; C-style escapes inside; `%%` is `%` and `$$` is `$`."""
    words: list[str] = []
    index = 0
    line = line.replace("\\\n", " ")
    while index < len(line):
        if line[index].isspace():
            index += 1
            continue
        word = ""
        if line[index] in "'\"":
            quote, index = line[index], index + 1
            while line[index] != quote:
                if line[index] == "\\":
                    index += 1
                word += line[index]
                index += 1
            index += 1
        else:
            while index < len(line) and not line[index].isspace():
                word += line[index]
                index += 1
        words.append(word.replace("%%", "%").replace("$$", "$"))
    return words


def exec_start(unit_text: str) -> str:
    text = unit_text.split("ExecStart=", 1)[1]
    return text.split("\nExecStop=", 1)[0]


UNIT = ContainerUnit(
    name="vllm", description="vLLM serving workhorse", image="registry:5000/vllm/vllm-openai@sha256:ab",
    arguments=["org/model", "--max-model-len", "131072", "--limit-mm-per-prompt", '{"image":1,"video":0}',
               "--enable-prefix-caching", "--chat-template", "it's {{ 100% }} $HOME \\ ;"],
    run_options=["--gpus", "all", "--ipc=host"], ports=["8000:8000"],
    volumes=["/var/lib/provision/huggingface:/root/.cache/huggingface"], env_file="/etc/provision/vllm/vllm.env",
    **UNIT_SETTINGS,
)


@pytest.mark.parametrize("word", ["plain", '{"image":1,"video":0}', "it's", "100%", "$HOME", "a b", "back\\slash",
                                  "semi;colon", ""])
def test_every_word_survives_systemds_splitting(word: str) -> None:
    assert systemd_split(systemd_word(word)) == [word]


def test_exec_start_is_the_exact_docker_run_argv() -> None:
    text = render_unit(UNIT)
    assert systemd_split(exec_start(text)) == UNIT.run_argv()
    assert UNIT.run_argv()[:5] == ["/usr/bin/docker", "run", "--rm", "--name", "vllm"]
    assert UNIT.run_argv()[-len(UNIT.arguments) - 1:] == [UNIT.image, *UNIT.arguments]


def test_unit_has_the_service_settings_of_the_reference() -> None:
    text = render_unit(UNIT)
    for line in ("Requires=docker.service", "After=docker.service network-online.target", "Restart=always",
                 "StartLimitIntervalSec=900", "StartLimitBurst=5", "TimeoutStartSec=1200",
                 "ExecStartPre=-/usr/bin/docker rm -f vllm", "ExecStop=/usr/bin/docker stop -t 30 vllm",
                 "WantedBy=multi-user.target"):
        assert line in text.splitlines(), line
    for option in ("--gpus all", "--ipc=host", "-p 8000:8000", "--env-file /etc/provision/vllm/vllm.env",
                   "-v /var/lib/provision/huggingface:/root/.cache/huggingface"):
        assert f"    {option} \\" in text, option


def test_one_option_a_line_for_a_readable_unit() -> None:
    lines = exec_start(render_unit(UNIT)).split(" \\\n    ")
    assert lines[0] == "/usr/bin/docker run --rm --name vllm"
    assert "--max-model-len 131072" in lines and "org/model" in lines
    assert "--limit-mm-per-prompt '{\"image\":1,\"video\":0}'" in lines


def test_env_file_holds_values_literally_and_leaves_out_empty_ones() -> None:
    text = render_env_file({"VLLM_API_KEY": Secret("k3y-value"), "HF_TOKEN": Secret(""), "HF_ENDPOINT": "http://x"})
    assert "VLLM_API_KEY=k3y-value\n" in text and "HF_ENDPOINT=http://x\n" in text and "HF_TOKEN" not in text


@pytest.mark.parametrize("env", [{"BAD NAME": "x"}, {"A": "two\nlines"}])
def test_env_file_refuses_what_it_cannot_hold(env: dict[str, str]) -> None:
    with pytest.raises(ValueError):
        render_env_file(env)

"""The flag list's kinds and choices against what the real vLLM CLI refused (its recorded stderr):
each value it refused is refused here before contact, with the same choices."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from provision.settings.check import flag_value_problem
from provision.settings.flags import load_flag_list

REPO = Path(__file__).resolve().parents[2]
FLAGS = load_flag_list(REPO / "roles/vllm/meta/vllm-serve-flags.txt")
# stderr of the real vllm CLI (0.33.0 wheel), recorded for the stand-in (its header says how)
REAL_ERRORS = (REPO / "tests/standins/vllm/real_cli_errors.txt").read_text()
REFUSAL = re.compile(r"vllm serve: error: argument --[^:]+: "
                     r"(invalid (?:choice|int value|float value|human_readable_int\w* value):.*)")


def refusals() -> list[tuple[str, str, str]]:
    """(flag, value, vLLM's error) of each recorded `serve M --flag value` that vLLM's parser refused."""
    found = []
    for case in REAL_ERRORS.split("=== ")[1:]:
        argv, *output = case.splitlines()
        words = argv.split()
        error = next((m.group(1) for line in output if (m := REFUSAL.match(line))), None)
        if error and len(words) == 4 and words[:2] == ["serve", "M"]:
            found.append((words[2].removeprefix("--"), words[3], error))
    assert len(found) >= 4, "the recording holds the refusals this test reads"
    return found


@pytest.mark.parametrize(("name", "value", "error"), refusals())
def test_what_vllms_parser_refused_is_refused_before_contact(name: str, value: str, error: str) -> None:
    kind = FLAGS.kind(name)
    assert kind is not None
    assert flag_value_problem(FLAGS, name, kind, value) is not None, error


def test_the_choices_are_the_ones_vllm_lists() -> None:
    [(name, listed)] = re.findall(r"argument --(\S+): invalid choice: '[^']*' \(choose from ([^)]*)\)", REAL_ERRORS)
    assert FLAGS.choices[name] == tuple(re.findall(r"'([^']*)'", listed))

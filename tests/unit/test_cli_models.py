"""`provision models`: every profile, with the context the planner fits on each known GPU."""

from __future__ import annotations

import json

from provision.cli.main import main

LAPTOP = "NVIDIA GeForce RTX 5090 Laptop GPU"


def test_every_profile_with_the_context_each_gpu_fits(capsys):
    assert main(["models", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {"gemma-4-26b-a4b-awq", "gemma-4-26b-a4b-awq-dflash", "qwen2.5-vl-7b-awq", "gemma-3-12b-w4a16"} <= set(rows)
    seed = rows["gemma-4-26b-a4b-awq"]
    assert seed["default"] and seed["vision"]
    # the seed's figure (REFERENCE.md §2 and the plan op's tests): 228544 on the 24 GB laptop card
    assert seed["gpus"][LAPTOP] == {"largest_context": 228544, "configured_fits": True}
    # full attention only: the KV cache grows with the whole context, capped by the model's own maximum
    assert rows["qwen2.5-vl-7b-awq"]["gpus"]["NVIDIA H200"]["largest_context"] == 128000
    # the drafter's weights leave less room for the KV cache than the plain profile
    assert rows["gemma-4-26b-a4b-awq-dflash"]["gpus"][LAPTOP]["largest_context"] < 228544


def test_the_table_names_every_profile(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    assert main(["models"]) == 0
    out = capsys.readouterr().out
    assert "gemma-4-26b-a4b-awq (default)" in out and "bimodal" in out

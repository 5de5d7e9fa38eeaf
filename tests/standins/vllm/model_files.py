"""Find the model's files the way vLLM does: a local folder, or the Hugging Face cache.

Real vLLM reads config.json and the *.safetensors weights from the HF cache
(`$HF_HUB_CACHE`, `$HF_HOME/hub` or `~/.cache/huggingface/hub`, layout
`models--ORG--NAME/{refs/REV, snapshots/COMMIT/...}`). The stand-in does the same, so a server
started before the weights were downloaded fails like the real one started without network.
It never downloads anything itself.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class ModelFilesError(Exception):
    """The model cannot be loaded; `lines` are what vLLM prints (its traceback's last lines)."""

    def __init__(self, lines: list[str]) -> None:
        super().__init__(lines[-1])
        self.lines = lines


@dataclass(frozen=True)
class ModelFiles:
    """Where the model lies and what its config says."""

    folder: Path
    config: dict[str, Any]
    weight_files: tuple[Path, ...]


def hub_cache_dir() -> Path:
    """huggingface_hub's cache folder, from the same environment variables."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"])
    hf_home = os.environ.get("HF_HOME") or str(Path(os.environ.get("XDG_CACHE_HOME", "~/.cache"))
                                               / "huggingface")
    return Path(hf_home).expanduser() / "hub"


def snapshot_folder(model: str, revision: str | None) -> Path | None:
    """The cached snapshot of repo `model` at `revision` (branch, tag or commit), if any."""
    storage = hub_cache_dir() / ("models--" + model.replace("/", "--"))
    revision = revision or "main"
    if re.fullmatch(r"[0-9a-f]{40}", revision):
        commit = revision
    else:
        ref = storage / "refs" / revision
        if not ref.is_file():
            return None
        commit = ref.read_text().strip()
    folder = storage / "snapshots" / commit
    return folder if folder.is_dir() else None


def locate_model(model: str, revision: str | None) -> ModelFiles:
    """Resolve `model` to its files or raise ModelFilesError with vLLM's failure lines."""
    local = Path(model)
    folder = local if local.is_dir() else snapshot_folder(model, revision)
    if folder is None or not (folder / "config.json").is_file():
        endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co")
        if os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "", "false"):
            raise ModelFilesError([
                "huggingface_hub.errors.LocalEntryNotFoundError: Cannot find an appropriate cached snapshot "
                "folder for the specified revision on the local disk and outgoing traffic has been disabled. "
                "To enable repo look-ups and downloads online, set 'HF_HUB_OFFLINE=0' as environment variable.",
            ])
        raise ModelFilesError([
            f"OSError: We couldn't connect to '{endpoint}' to load the files, and couldn't find them in the "
            "cached files.",
            "Check your internet connection or see how to run the library in offline mode at "
            "'https://huggingface.co/docs/transformers/installation#offline-mode'.",
        ])
    try:
        config = json.loads((folder / "config.json").read_text())
    except (OSError, ValueError) as error:
        raise ModelFilesError([f"OSError: It looks like the config file at '{folder / 'config.json'}' is "
                               f"not a valid JSON file. ({error})"]) from error
    weights = tuple(sorted(folder.glob("*.safetensors")))
    if not weights:
        raise ModelFilesError([f"RuntimeError: Cannot find any model weights with `{model}`"])
    return ModelFiles(folder=folder, config=config, weight_files=weights)

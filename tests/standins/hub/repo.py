"""A small model repository generated on start: what the stand-in hub serves.

Files as a real Hugging Face repo of a Gemma-4-like vision model has them: config.json (text config
of REFERENCE.md §2: 30 layers, 25 sliding-window layers with 8 KV heads of 256, 5 full-attention
layers with 2 KV heads of 512, window 1024), generation_config.json, a small tokenizer.json and
tokenizer_config.json, and N "safetensors" shards with a real safetensors header followed by
deterministic pseudo-random bytes, plus their index. Shards are LFS files (sha256 ETag) like on the
Hub; the rest are plain git blobs (git blob sha1 ETag). The commit sha is derived from the content.
"""

from __future__ import annotations

import hashlib
import json
import random
import struct
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class RepoFile:
    """One file of the repository with the ids the Hub reports for it."""

    path: str
    size: int
    blob_id: str
    lfs_sha256: str | None

    @property
    def etag(self) -> str:
        return self.lfs_sha256 or self.blob_id


@dataclass(frozen=True)
class Repository:
    """The generated repository: where its files lie and the commit they form."""

    repo_id: str
    folder: Path
    commit: str
    files: tuple[RepoFile, ...]

    def file(self, path: str) -> RepoFile | None:
        return next((f for f in self.files if f.path == path), None)


def git_blob_sha1(data: bytes) -> str:
    """The git object id of a blob, which the Hub uses as the ETag of non-LFS files."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def lfs_pointer(sha256: str, size: int) -> bytes:
    """The git-lfs pointer file that git stores in place of a large file."""
    return f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\nsize {size}\n".encode()


def gemma4_like_config() -> dict[str, object]:
    layer_types = (["sliding_attention"] * 5 + ["full_attention"]) * 5
    return {
        "architectures": ["Gemma4ForConditionalGeneration"],
        "model_type": "gemma4",
        "torch_dtype": "bfloat16",
        "text_config": {
            "model_type": "gemma4_text",
            "num_hidden_layers": 30,
            "layer_types": layer_types,
            "sliding_window": 1024,
            "num_attention_heads": 16,
            "num_key_value_heads": 8,
            "head_dim": 256,
            "num_global_key_value_heads": 2,
            "global_head_dim": 512,
            "hidden_size": 2816,
            "num_experts": 128,
            "num_experts_per_tok": 8,
            "max_position_embeddings": 262144,
            "vocab_size": 262144,
        },
        "vision_config": {"model_type": "siglip_vision_model", "image_size": 896, "patch_size": 14},
        "quantization_config": {"quant_method": "compressed-tensors", "format": "pack-quantized",
                                "config_groups": {"group_0": {"weights": {"num_bits": 4, "group_size": 32}}}},
    }


def _tokenizer_json() -> dict[str, object]:
    vocab = {f"tok{i}": i for i in range(256)}
    return {"version": "1.0", "truncation": None, "padding": None, "added_tokens": [],
            "model": {"type": "BPE", "vocab": vocab, "merges": []}}


def _safetensors_shard(shard: int, size: int, seed: str) -> bytes:
    """A shard of exactly `size` bytes: a valid safetensors header and one U8 tensor filling the rest."""
    header = b""
    data_len = 0
    for _ in range(3):  # the header length depends on the digits of the data length
        data_len = max(size - 8 - len(header), 0)
        header_json = json.dumps({"__metadata__": {"format": "pt"},
                                  f"model.layers.{shard}.weight_packed": {
                                      "dtype": "U8", "shape": [data_len], "data_offsets": [0, data_len]}})
        header = header_json.encode().ljust(((len(header_json) + 7) // 8) * 8)
    payload = random.Random(f"{seed}:{shard}").randbytes(size - 8 - len(header))
    return struct.pack("<Q", len(header)) + header + payload


def generate_repository(repo_id: str, folder: Path, shard_size: int, shards: int = 2) -> Repository:
    """Write the repository's files under `folder` (replacing what was there) and describe them."""
    folder.mkdir(parents=True, exist_ok=True)
    contents: dict[str, bytes] = {
        "config.json": json.dumps(gemma4_like_config(), indent=2).encode(),
        "generation_config.json": json.dumps({"bos_token_id": 2, "eos_token_id": [1, 106],
                                              "do_sample": True, "top_k": 64, "top_p": 0.95}).encode(),
        "tokenizer.json": json.dumps(_tokenizer_json()).encode(),
        "tokenizer_config.json": json.dumps({"tokenizer_class": "GemmaTokenizer",
                                             "model_max_length": 262144}).encode(),
    }
    weight_map = {}
    for shard in range(shards):
        name = f"model-{shard + 1:05d}-of-{shards:05d}.safetensors"
        contents[name] = _safetensors_shard(shard, shard_size, repo_id)
        weight_map[f"model.layers.{shard}.weight_packed"] = name
    contents["model.safetensors.index.json"] = json.dumps(
        {"metadata": {"total_size": shard_size * shards}, "weight_map": weight_map}).encode()
    files = []
    for path, data in sorted(contents.items()):
        (folder / path).write_bytes(data)
        lfs = hashlib.sha256(data).hexdigest() if path.endswith(".safetensors") else None
        # For an LFS file git stores (and the Hub reports as its oid) the pointer, not the content.
        blob = lfs_pointer(lfs, len(data)) if lfs else data
        files.append(RepoFile(path=path, size=len(data), blob_id=git_blob_sha1(blob), lfs_sha256=lfs))
    commit = hashlib.sha1("".join(f"{f.path}\0{f.blob_id}\n" for f in files).encode()).hexdigest()
    return Repository(repo_id=repo_id, folder=folder, commit=commit, files=tuple(files))

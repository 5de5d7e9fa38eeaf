"""An image a bundle carries (the model server's): pulled on this machine when absent (docker's
progress JSON: bytes per layer), then `docker save`d to one archive, hashed as it is written, with its
image id (the sha256 of its config: what `docker load` on the host must reproduce) and its repository
digests."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import docker
import docker.errors

from provision.bundle.progress import Transfer
from provision.errors import ProvisionError
from provision.ops.docker_image import PullProgress


def present_or_pulled(reference: str, transfer: Transfer) -> Any:
    client = docker.from_env()
    try:
        return client.images.get(reference)
    except docker.errors.ImageNotFound:
        pass
    repository, tag = (reference.rsplit(":", 1) if ":" in reference.rsplit("/", 1)[-1] else (reference, "latest"))
    reader = PullProgress()
    try:
        for event in client.api.pull(repository, tag=tag, stream=True, decode=True):
            if reader.take(event):
                transfer.set(*reader.bytes)
            if reader.error:
                raise ProvisionError(f"docker pull {reference} failed on this machine: {reader.error}")
        return client.images.get(reference)
    except docker.errors.APIError as error:
        raise ProvisionError(f"docker pull {reference} failed on this machine: {error.explanation or error}") from error


def save_image(image: Any, reference: str, target: Path, transfer: Transfer) -> str:
    """`docker save` of `reference` into `target` (through `.part`); returns its sha256."""
    part = target.with_name(target.name + ".part")
    digest = hashlib.sha256()
    transfer.set(total=int(image.attrs.get("Size") or 0) or None)
    with part.open("wb") as handle:
        for chunk in docker.from_env().api.get_image(reference, chunk_size=1024 * 1024):
            handle.write(chunk)
            digest.update(chunk)
            transfer.advance(len(chunk))
    part.replace(target)
    return digest.hexdigest()

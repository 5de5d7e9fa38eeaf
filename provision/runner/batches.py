"""Serial batches (Ansible's `serial`): a number, a percentage, or a ramp like 1,25%,100%."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TypeVar

from provision.errors import InputError

T = TypeVar("T")


def parse_serial(text: str) -> list[int | str]:
    """'1,25%,100%' -> [1, '25%', '100%']; each item a positive integer or a percentage."""
    items: list[int | str] = []
    for raw in text.split(","):
        item = raw.strip()
        validate_serial_item(item, text)
        items.append(item if item.endswith("%") else int(item))
    return items


def validate_serial_item(item: int | str, whole: object) -> None:
    text = str(item).strip()
    number = text[:-1] if text.endswith("%") else text
    if not number.isdigit() or int(number) <= 0:
        raise InputError(f"serial: {item!r} in {whole!r} is neither a positive number nor a percentage",
                         key="serial")


def batch_sizes(serial: Sequence[int | str] | None, total: int) -> list[int]:
    """Ansible's rule: each item sized against all hosts (percent rounds down, at least 1); the
    last item repeats until every host had its turn."""
    if total == 0:
        return []
    if not serial:
        return [total]
    sizes: list[int] = []
    remaining = total
    index = 0
    while remaining > 0:
        item = serial[min(index, len(serial) - 1)]
        text = str(item).strip()
        if text.endswith("%"):
            size = max(1, math.floor(total * int(text[:-1]) / 100))
        else:
            size = int(text)
        size = min(size, remaining)
        sizes.append(size)
        remaining -= size
        index += 1
    return sizes


def batches(items: Sequence[T], serial: Sequence[int | str] | None) -> list[list[T]]:
    out, start = [], 0
    for size in batch_sizes(serial, len(items)):
        out.append(list(items[start : start + size]))
        start += size
    return out


def too_many_failed(failed: int, batch: int, max_fail_percentage: float | None) -> bool:
    """Stop the rollout? With a limit: when failures exceed it (per batch, like Ansible);
    without one: only when every host of the batch failed."""
    if batch == 0:
        return False
    if max_fail_percentage is None:
        return failed == batch
    return failed * 100 / batch > max_fail_percentage

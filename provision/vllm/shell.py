"""Quoting for the bash scripts the service layer runs on hosts (kept here so that the service layer
imports nothing from the operations that use it)."""

from __future__ import annotations


def quote(value: object) -> str:
    """A value as one single-quoted bash word."""
    return "'" + str(value).replace("'", "'\"'\"'") + "'"

"""The command line: `provision up|facts|...`."""

from provision.cli.main import main

__all__ = ["main"]

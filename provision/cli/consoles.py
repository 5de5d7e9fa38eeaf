"""The consoles every command prints through: rich never reads markup in them.

Host names, `--limit` patterns, file paths, variable values and remote output are printed, and
rich's markup would read `[/]` in any of them as a closing tag (a MarkupError traceback instead of
the message) and `[a:z]` as a style (the text vanishes). So markup is off for the whole console;
the few styled words are `Text` objects (`styled`), whose text is never parsed.
"""

from __future__ import annotations

from rich.console import Console
from rich.text import Text


def plain_console(stderr: bool = False) -> Console:
    """A console that prints strings as they are (no markup; tables' string cells included)."""
    return Console(stderr=stderr, markup=False)


def styled(label: str, style: str, rest: str = "") -> Text:
    """`label` in `style`, then `rest` as it is: e.g. styled("error:", "bold red", " " + message)."""
    return Text.assemble((label, style), rest)

"""Transfer rates for progress lines (downloads, copies, pulls)."""

from __future__ import annotations

from typing import Any

MIB = 1024 * 1024


class TransferRate:
    """Bytes per second since the first report (a resumed download's earlier bytes do not count)."""

    def __init__(self, clock: Any) -> None:
        self.clock = clock
        self.start: tuple[float, int] | None = None

    def text(self, done: int) -> str:
        """", 12.3 MiB/s" once a rate can be told, else ""."""
        now = self.clock()
        if self.start is None:
            self.start = (now, done)
            return ""
        elapsed, moved = now - self.start[0], done - self.start[1]
        return f", {moved / elapsed / MIB:.1f} MiB/s" if elapsed > 0 and moved > 0 else ""

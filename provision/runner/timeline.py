"""Where a host's run spent its time: its phases (the tasks of one role, in the order they ran; a task
started early, as a background phase of its own) with their start and end, the bytes and the rate
where known, and what a phase waited for. Printed after the recap as plain lines, kept in the JSON
document under each host's `timeline`.

The engine runs one task at a time per host, so the foreground phases are the critical path; a
background phase (runner/early.py) shortens it by what it overlapped, and a phase that waited for one
says how long: that wait is the part of the background work nothing overlapped.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from provision.runner.results import HostResult, RunResult, Status

MIB = 1024 * 1024


@dataclass
class Phase:
    name: str
    start: float  # wall clock (time.time)
    end: float
    background: bool = False
    tasks: int = 0
    changed: int = 0
    bytes: int | None = None
    waited: list[tuple[str, float]] = field(default_factory=list)  # (task started early, seconds)

    @property
    def rate(self) -> float | None:
        """Bytes per second over the phase, when its bytes are known."""
        seconds = self.end - self.start
        return self.bytes / seconds if self.bytes is not None and seconds > 0 else None


def phases(host: HostResult) -> list[Phase]:
    """The host's phases in the order they began: consecutive tasks of one role (by start time, so
    the tasks that ran early sit where they ran), then one background phase per task started early."""
    ran = sorted((task for task in host.tasks if task.started and task.status != Status.SKIPPED),
                 key=lambda task: task.started)
    found: list[Phase] = []
    for task in ran:
        name = task.role or "(tasks)"
        if not found or found[-1].name != name or found[-1].background:
            found.append(Phase(name, task.started, task.started + task.elapsed))
        phase = found[-1]
        phase.end = max(phase.end, task.started + task.elapsed)
        phase.tasks += 1
        phase.changed += task.changed
        if task.early:
            phase.waited.append((task.task, float(task.early.get("waited", 0.0))))
    for task in host.tasks:
        if task.early:
            early = task.early
            found.append(Phase(f"{task.task} (host unit {early.get('unit')}, after role {early.get('after')})",
                               float(early["started"]), float(early["ended"]), background=True, tasks=1,
                               changed=int(task.changed), bytes=early.get("bytes")))
    return sorted(found, key=lambda phase: phase.start)


def document(host: HostResult) -> list[dict[str, Any]]:
    """The timeline as the JSON document keeps it (times are wall clock, seconds since the epoch)."""
    return [{"phase": p.name, "background": p.background, "start": round(p.start, 3), "end": round(p.end, 3),
             "tasks": p.tasks, "changed": p.changed, "bytes": p.bytes,
             "rate": round(p.rate, 1) if p.rate is not None else None,
             "waited": [{"for": name, "seconds": round(seconds, 3)} for name, seconds in p.waited]}
            for p in phases(host)]


def lines(run: RunResult) -> list[str]:
    """The timeline of each host that ran a task, as plain lines (no terminal needed)."""
    out: list[str] = []
    for name, host in run.hosts.items():
        found = phases(host)
        if not found:
            continue
        zero = min(phase.start for phase in found)
        out.append(f"timeline of {name} (seconds from its first task; background phases ran beside the others):")
        for phase in found:
            text = (f"  {phase.start - zero:8.1f} {phase.end - zero:8.1f} {phase.end - phase.start:8.1f} s  "
                    f"{'background: ' if phase.background else ''}{phase.name}")
            details = [f"{phase.changed} of {phase.tasks} changed"] if not phase.background else []
            if phase.bytes is not None:
                details.append(f"{phase.bytes / MIB:.1f} MiB")
            if phase.rate is not None:
                details.append(f"{phase.rate / MIB:.1f} MiB/s")
            details += [f"waited {seconds:.1f} s for {task!r}" for task, seconds in phase.waited]
            out.append(text + (f" ({'; '.join(details)})" if details else ""))
    return out

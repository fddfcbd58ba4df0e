"""What a supervisor tells the others about each of its children: one ``ChildReport``
per child, published with its heartbeat (once per maintenance round, never per job) in
``supervisor.supervisors.info["children"]`` for ``status`` and the dashboard.

A record is a frozen dataclass turned into a JSON object by ``as_json``; readers take
the keys they know and ignore the rest, so a field added later (say, whether the child
is busy in native code) needs no change on the reading side and no migration.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class ChildReport:
    """One child now: its worker number and pid, its state (``booting``, ``idle``,
    ``busy``, ``stopping``, ...), the job at the head of its pipe (id, kind, queue,
    attempt) and for how long it has run it (seconds since it was handed over or
    started), how many jobs its pipe holds, its resident memory in bytes (None when
    /proc cannot tell), how many jobs it has finished and its age in seconds."""

    worker: int
    pid: int
    state: str
    job_id: int | None
    kind: str | None
    queue: str | None
    attempt: int | None
    job_seconds: float | None
    held: int
    rss_bytes: int | None
    jobs_done: int
    age_seconds: float

    def as_json(self) -> dict[str, Any]:
        """The record as a JSON-ready dict (durations rounded to milliseconds)."""
        out = asdict(self)
        for key in ("job_seconds", "age_seconds"):
            if out[key] is not None:
                out[key] = round(out[key], 3)
        return out

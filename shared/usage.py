"""What one attempt of a job cost: CPU time, wall time and peak memory.

Measured in the child (``workers.usage``), carried to the parent as 24 bytes in the
DONE and FAILED frames (``PACKED``), stored as the JSON object ``to_json`` writes: in
``supervisor.jobs.usage`` for the last attempt and in each failed attempt's errors entry::

    {"cpu_seconds": 0.2013, "wall_seconds": 0.2051, "max_rss_bytes": 31457280}
"""

from __future__ import annotations

import struct
from typing import Any, NamedTuple

from shared.units import format_size

PACKED = struct.Struct("!ddq")  # cpu seconds, wall seconds, peak RSS bytes
_pack = PACKED.pack
_unpack = PACKED.unpack_from
_JSON = '{"cpu_seconds":%.6f,"wall_seconds":%.6f,"max_rss_bytes":%d}'


class Usage(NamedTuple):
    """One attempt's cost. ``cpu_seconds``: user + system time the child's whole process
    tree spent during the job (the child, the processes it reaped, its live descendants:
    ``workers.usage``); ``wall_seconds``: from the handler's
    start to its end; ``max_rss_bytes``: the child's peak resident memory during the job
    (its high-water mark is reset as each job starts)."""

    cpu_seconds: float
    wall_seconds: float
    max_rss_bytes: int

    def pack(self) -> bytes:
        """The 24 bytes a frame carries."""
        return _pack(self.cpu_seconds, self.wall_seconds, self.max_rss_bytes)

    @classmethod
    def unpack(cls, data: bytes, offset: int = 0) -> Usage:
        """The usage packed at ``offset`` of ``data`` (``struct.error`` if short)."""
        return cls._make(_unpack(data, offset))

    def to_json(self) -> str:
        """The JSON text stored in the database (microsecond and byte precision)."""
        return _JSON % self

    def describe(self) -> str:
        """For a person: ``wall 1.25 s, CPU 1.20 s, peak 310.0 MiB``."""
        return (f"wall {_seconds(self.wall_seconds)}, CPU {_seconds(self.cpu_seconds)}, "
                f"peak {format_size(self.max_rss_bytes)}")

    @classmethod
    def from_json(cls, value: Any) -> Usage | None:
        """The usage of a stored JSON object, or None if it is not one."""
        if not isinstance(value, dict):
            return None
        try:
            return cls(float(value["cpu_seconds"]), float(value["wall_seconds"]),
                       int(value["max_rss_bytes"]))
        except (KeyError, TypeError, ValueError):
            return None


def _seconds(value: float) -> str:
    return f"{value * 1000:.0f} ms" if value < 1 else f"{value:.2f} s"


def ran_at_least(heard: float, usage: Usage | None) -> float:
    """How long an attempt ran: the parent's reading, START to answer, but never less
    than the child's own measure of its handler (``usage.wall_seconds``). The parent's
    reading is near zero whenever it reads both in one turn: when it lets answers gather
    (``Arbiter._settle``), or runs late on a loaded machine (a first sample of zero once
    set the depth to its maximum: issue 31)."""
    return heard if usage is None else max(heard, usage.wall_seconds)
